package pop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func secondNodes(t *testing.T) (eu, us *Node) {
	t.Helper()
	return pairNodes(t, Rule{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: ScopeGlobal})
}

// With a PoP skew set, another PoP's entries for a window that starts
// further ahead are ignored (counted before its clock stepped back); those
// within it merge, and MaxSkew still bounds the own PoP's members.
func TestPoPSkewBoundsOtherPoPs(t *testing.T) {
	W := int64(time.Second)
	start := (t0/W + 1) * W
	eu, us := secondNodes(t)
	eu.Link().SetPoPSkew(500 * time.Millisecond)
	for range 10 {
		_, _ = us.Decide(start+W+W/10, "api", "k", 1) // us a window ahead
	}
	out := us.Link().Flush(start+W+W/10, nil)
	st := eu.Link().Apply(start+W/10, &out.PoP, ScopeGlobal)
	assert.Equal(t, 1, st.Ahead, "an entry 900 ms ahead of the PoP skew is ignored")
	st = eu.Link().Apply(start+W*7/10, &out.PoP, ScopeGlobal)
	assert.Equal(t, 1, st.Merged, "300 ms ahead it merges")

	eu, us = secondNodes(t)
	eu.Link().SetPoPSkew(0)
	st = eu.Link().Apply(start+W/10, &out.PoP, ScopeGlobal)
	assert.Equal(t, 1, st.Merged, "without a PoP skew, MaxSkew bounds it")
}

// A clock that steps forward by a window carries the keys counted in the
// window it left; one that swings by a fraction of a window does not.
func TestStepForwardCarriesKeys(t *testing.T) {
	W := int64(time.Second)
	start := (t0/W + 1) * W
	eu, _ := secondNodes(t)
	late := start + W*9/10
	for range 30 {
		_, _ = eu.Decide(late, "api", "k", 1)
	}
	swung := late + 150*int64(time.Millisecond)
	eu.Link().StepForward(late, swung)
	v, err := eu.View(swung, "api", "k")
	require.NoError(t, err)
	assert.InDelta(t, 30*0.95, v.Estimate, 0.01, "a swing of 150 ms across the window's end leaves the key in its window")

	eu, _ = secondNodes(t)
	before := start + W/4
	for range 30 {
		_, _ = eu.Decide(before, "api", "k", 1)
	}
	after := before + W
	eu.Link().StepForward(before, after)
	v, err = eu.View(after, "api", "k")
	require.NoError(t, err)
	assert.InDelta(t, 30, v.Estimate, 0.01, "counted in the window the clock stepped into, not weighed as the window before")
	d, _ := eu.Decide(after, "api", "k", 70)
	assert.True(t, d.Allowed)
	d, _ = eu.Decide(after, "api", "k", 1)
	assert.False(t, d.Allowed, "the carried counts hold their part of the limit")
}
