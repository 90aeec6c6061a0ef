package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGCRARuleUnderAPartition: a node-scoped gcra rule of anycast keys is
// decided by the node that serves each key alone, so a cut changes nothing:
// the fleet admits exactly what the central node admits, and no key is ever
// admitted more than limit + burst in a trailing window.
func TestGCRARuleUnderAPartition(t *testing.T) {
	sc, err := Load("../scenarios/gcra-node-pace.yaml")
	require.NoError(t, err)
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	rule := sc.Rules[0]
	bound := float64(rule.Limit+rule.Burst) / float64(rule.Limit)
	t.Logf("max a/l %.3f (bound %.2f), admitted %d (central %d)", r.MaxAdmittedRatio, bound, r.Admitted, r.Central.Admitted)
	assert.Equal(t, r.Central.Admitted, r.Admitted)
	assert.LessOrEqual(t, r.MaxAdmittedRatio, bound)
	assert.Greater(t, r.MaxAdmittedRatio, 1.0, "the traffic is twice the pace: the burst is spent")
}

// TestGCRAScenarioErrors: the scenario schema takes the rule fields, and
// refuses what a gcra rule cannot be, naming the field.
func TestGCRAScenarioErrors(t *testing.T) {
	base := "name: x\nduration: 10s\ntopology: [{region: eu, pops: [{name: ams, nodes: 1}]}]\ntraffic: [{rule: p, rate: 10/s}]\nrules: [%s]\n"
	for _, tc := range []struct{ rule, want string }{
		{"{name: p, limit: 10, window: 1s, algorithm: gcra, on_partition: share}", "rules[0].on_partition: an algorithm: gcra rule keeps pacing"},
		{"{name: p, limit: 10, window: 1s, algorithm: gcra, scope: node, burst: 11}", "rules[0].burst: 11 exceeds limit 10"},
		{"{name: p, limit: 10, window: 1s, algorithm: pace, scope: node}", `rules[0].algorithm: unknown algorithm "pace"`},
	} {
		_, err := Parse([]byte(fmt.Sprintf(base, tc.rule)))
		require.Error(t, err, tc.rule)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err := Parse([]byte(fmt.Sprintf(base, "{name: p, limit: 10, window: 1s, algorithm: gcra, scope: node, burst: 2}")))
	assert.NoError(t, err)
}

// TestGlobalGCRARuleUnderAPartition: a global gcra rule whose keys reach
// every PoP. Healthy, the fleet paces as the central node does: a key gets
// at most limit + burst in a trailing window, plus what is in flight (the
// rate times the replication delay). Cut apart under keep, each side paces
// on its own: at most sides x (limit + burst), and never less than the
// central node admits.
func TestGlobalGCRARuleUnderAPartition(t *testing.T) {
	sc, err := Load("../scenarios/gcra-global-pace.yaml")
	require.NoError(t, err)
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	rule := sc.Rules[0]
	one := float64(rule.Limit+rule.Burst) / float64(rule.Limit)
	// In flight: a key's traffic (20/s) over a flush and the slowest link
	// (50ms + 90ms): 3 requests.
	inFlight := 3.0 / float64(rule.Limit)
	phase, central := map[string]Phase{}, map[string]Phase{}
	for _, p := range r.Phases {
		phase[p.Name] = p
	}
	for _, p := range r.Central.Phases {
		central[p.Name] = p
	}
	healthy, cut := phase["healthy"], phase["partitioned"]
	t.Logf("healthy max a/l %.3f (bound %.2f), cut %.3f (bound %.2f), cut admitted %d (central %d)",
		healthy.MaxAdmittedRatio, one+inFlight, cut.MaxAdmittedRatio, 2*one, cut.Admitted, central["partitioned"].Admitted)
	assert.LessOrEqual(t, healthy.MaxAdmittedRatio, one+inFlight)
	assert.LessOrEqual(t, cut.MaxAdmittedRatio, 2*one)
	assert.Greater(t, cut.MaxAdmittedRatio, one, "each side spends its own pace")
	assert.GreaterOrEqual(t, cut.Admitted, central["partitioned"].Admitted)
}
