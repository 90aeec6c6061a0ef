package crdt

import (
	"slices"
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A walk of what settled (a periodic anti-entropy round) gives a key in
// the two walks after the one that saw it change, when it did not change
// again meanwhile, then no more until it changes; a key that goes on
// changing is not given. The PoP totals follow the own and members'
// counts, the region totals also the own region's other PoPs, never
// another region's. A full walk gives every key and starts no period.
func TestWalkChanged(t *testing.T) {
	self := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}
	s := NewStore(StoreConfig{Self: self, MaxKeys: 64, Seed: 1})
	rule := RuleID(1)
	now := Now{Index: 10, Width: 1000}
	idx := func(RuleID) int64 { return 10 }
	fra, ok := s.Intern(identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 5))
	require.True(t, ok)
	iad, ok := s.Intern(identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 5))
	require.True(t, ok)

	walk := func(part func(func(RuleID) int64, int, int, bool, func(FlushEntry)), changed bool) []string {
		var keys []string
		part(idx, 0, 1, changed, func(e FlushEntry) { keys = append(keys, e.Key) })
		slices.Sort(keys)
		return slices.Compact(keys)
	}
	totals := func(changed bool) []string { return walk(s.TotalsPart, changed) }
	region := func(changed bool) []string { return walk(s.RegionPart, changed) }
	own := func(changed bool) []string { return walk(s.OwnPart, changed) }

	s.Admit(rule, "a", now, 100, 4, true)
	require.Equal(t, Merged, s.Merge(rule, "b", 10, 10, fra, 3))
	require.Equal(t, Merged, s.Merge(rule, "c", 10, 10, iad, 3))
	s.Admit(rule, "c", now, 100, 1, true)

	assert.Empty(t, own(true), "changed since the last walk: not settled yet")
	assert.Empty(t, totals(true))
	assert.Empty(t, region(true))
	for round := range 2 {
		assert.Equal(t, []string{"a", "c"}, own(true), "round %d: own, as the PoP totals", round)
		assert.Equal(t, []string{"a", "c"}, totals(true), "round %d", round)
		assert.Equal(t, []string{"a", "b", "c"}, region(true), "round %d", round)
	}
	assert.Empty(t, own(true), "settled three rounds ago")
	assert.Empty(t, totals(true))
	assert.Empty(t, region(true))

	assert.Equal(t, []string{"a", "c"}, totals(false), "a full walk gives every key")
	assert.Equal(t, []string{"a", "b", "c"}, region(false))
	assert.Empty(t, totals(true), "and starts no period")
	assert.Empty(t, region(true))

	require.Equal(t, Merged, s.Merge(rule, "c", 10, 10, iad, 9))
	require.Equal(t, Merged, s.Merge(rule, "b", 10, 10, fra, 5))
	assert.Empty(t, region(true), "changed since the last walk")
	assert.Empty(t, totals(true), "another region's PoP changes neither total")
	assert.Equal(t, []string{"b"}, region(true), "a PoP of the region changes its total only")
	assert.Equal(t, []string{"b"}, region(true))
	assert.Empty(t, region(true))

	for range 4 {
		require.True(t, s.Admit(rule, "a", now, 100, 1, true).Allowed)
		// As a round walks them: the own counts, then the PoP totals.
		assert.Empty(t, own(true), "a key that goes on changing is repaired by its next message")
		assert.Empty(t, own(true), "the own walk starts no period")
		assert.Empty(t, totals(true))
	}
	for range 2 {
		assert.Equal(t, []string{"a"}, own(true), "settled")
		assert.Equal(t, []string{"a"}, totals(true))
	}
	assert.Empty(t, own(true))
	assert.Empty(t, totals(true))
}
