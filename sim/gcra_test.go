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
