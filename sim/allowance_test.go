package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key under attack at 200x its limit's rate, over 20 PoPs of 2 nodes and
// no fault: without the near-limit allowance every node spends what it sees
// during the replication lag and the fleet overshoots far beyond the limit;
// with it the fleet stays within one request per node of the limit and
// admits what one central node admits.
func TestHotKeyAttackStaysAtLimit(t *testing.T) {
	accuracyTest(t)
	sc, err := Load("../scenarios/hot-key-attack.yaml")
	require.NoError(t, err)
	sc.Duration = 20 * time.Second // two windows: the cold start, then one of steady attack
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	nodes := 0
	for _, rg := range sc.Topology {
		for _, p := range rg.PoPs {
			nodes += p.Nodes
		}
	}
	limit := float64(sc.Rules[0].Limit)
	t.Logf("max a/l %.3f, admitted %d, central %d", r.MaxAdmittedRatio, r.Admitted, r.Central.Admitted)
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.15)
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1+float64(nodes)/limit, "at most one request per node over the limit")
	assert.GreaterOrEqual(t, float64(r.Admitted), 0.95*float64(r.Central.Admitted))

	off := false
	sc.Replication.NearLimitAllowance = &off
	res, err = Run(sc, Options{})
	require.NoError(t, err)
	t.Logf("without the allowance: max a/l %.3f, admitted %d", res.Report.MaxAdmittedRatio, res.Report.Admitted)
	assert.Greater(t, res.Report.MaxAdmittedRatio, 2.0)
	assert.Greater(t, float64(res.Report.Admitted), 1.3*float64(r.Central.Admitted))
}

// many-keys before its cut: 20 000 Zipf keys on four PoPs, the hottest at
// twenty times its limit's rate. Most of the overshoot came at the cold
// start, when every PoP admits blind for the first inter-region round trip.
func TestManyKeysHealthyNearCentral(t *testing.T) {
	accuracyTest(t)
	sc, err := Load("../scenarios/many-keys.yaml")
	require.NoError(t, err)
	sc.Duration, sc.Events = 15*time.Second, nil // the cold start and half a window after it, healthy
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	t.Logf("max a/l %.3f (central %.3f), admitted %d (central %d)", r.MaxAdmittedRatio, r.Central.MaxAdmittedRatio, r.Admitted, r.Central.Admitted)
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.35)
	assert.GreaterOrEqual(t, float64(r.Admitted), 0.95*float64(r.Central.Admitted))
}

// Far from their limits keys are decided as the estimate says, even where a
// node's equal share of the limit is below one request: a fleet of 30
// nodes, a per-IP limit of 15 per 20 s, clients pinned to their PoP at a
// third of it. What the fleet rejects beyond the central node is a node's
// second request of an IP new to it within one replication lag.
func TestPerIPFarFromLimitNotRestricted(t *testing.T) {
	accuracyTest(t)
	sc, err := Load("../scenarios/per-ip-far-from-limit.yaml")
	require.NoError(t, err)
	sc.Duration = 30 * time.Second // a window and a half: past the cold start
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	t.Logf("admitted %d (central %d), wrongly rejected %.4f", r.Admitted, r.Central.Admitted, r.WronglyRejectedFraction)
	assert.LessOrEqual(t, r.WronglyRejectedFraction, 0.01)
	assert.GreaterOrEqual(t, float64(r.Admitted), 0.99*float64(r.Central.Admitted))
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.0)
}
