package pop

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sums of one rule and key follow the counter (the rule id), not the
// handle: a reload that keeps a window keeps its id in a new state, and two
// handles of "a" (before and after a reload of the same rules) count one
// key. Summed apart, an all-or-nothing request would spend on a denial and
// a strict one pass the sum check.
func TestSumsAcrossHandlesOfOneCounter(t *testing.T) {
	n := pipelineNode(t)
	before := chk(t, n, "a", "k", 2)
	require.NoError(t, n.SetRules(pipelineRules()))
	after := chk(t, n, "a", "k", 2)
	require.Equal(t, before.Rule.r.id, after.Rule.r.id, "one counter")
	require.NotSame(t, before.Rule.r, after.Rule.r)

	res := make([]Result, 2)
	_, err := n.DecideChecks(t0, &Request{Combine: All, Strict: true, Checks: []Check{before, after}}, res)
	assert.ErrorIs(t, err, ErrSumOverLimit, "2+2 > 3 on one counter")

	o, _ := decideChecks(t, n, Request{Combine: All, Checks: []Check{before, after}})
	assert.False(t, o.Allowed)
	assert.Equal(t, uint64(0), spent(t, n, "a", "k"), "a denied all-or-nothing request spends nothing")
}

// Past smallSum (the sort path) the same.
func TestSortPathSumsAcrossHandles(t *testing.T) {
	n := pipelineNode(t)
	before := chk(t, n, "a", "k", 2)
	require.NoError(t, n.SetRules(pipelineRules()))
	after := chk(t, n, "a", "k", 2)
	var cs []Check
	for i := range 20 {
		cs = append(cs, chk(t, n, "b", string(rune('a'+i)), 1))
	}
	cs = append(cs, before, after)
	res := make([]Result, len(cs))
	_, err := n.DecideChecks(t0, &Request{Combine: All, Strict: true, Checks: cs}, res)
	assert.ErrorIs(t, err, ErrSumOverLimit)
}
