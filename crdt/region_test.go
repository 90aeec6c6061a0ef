package crdt

import (
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A region's aggregate is a valid sender that survives the wire and its
// string form; a PoP or node called "*" is not.
func TestRegionReplica(t *testing.T) {
	r := identity.RegionReplica("eu", 9)
	require.NoError(t, r.Validate())
	assert.True(t, r.IsRegion())
	assert.True(t, r.IsPoP(), "an aggregate")
	assert.False(t, identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 9).IsRegion())
	assert.Equal(t, "eu/*/*#9", r.String())
	got, err := identity.ParseReplica(r.String())
	require.NoError(t, err)
	assert.Equal(t, r, got)

	for _, bad := range []identity.Replica{
		identity.RegionReplica("eu.west", 1),
		{PoPID: identity.PoPID{Region: "eu", PoP: identity.RegionPoP}, Node: "n1", Incarnation: 1}, // a node of PoP "*"
	} {
		assert.ErrorIs(t, bad.Validate(), identity.ErrBadReplica, bad.String())
	}
}

// A region total is the own count plus the counts of the own region's
// replicas, members and PoP aggregates of every epoch, without any region
// aggregate and without other regions' replicas.
func TestRegionTotal(t *testing.T) {
	self := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}
	s := NewStore(StoreConfig{Self: self, MaxKeys: 64, Seed: 1})
	rule := RuleID(1)
	now := Now{Index: 10, Width: 1000}
	s.Admit(rule, "k", now, 100, 4, true)
	for _, c := range []struct {
		r     identity.Replica
		count uint64
	}{
		{identity.Replica{PoPID: self.PoPID, Node: "a2", Incarnation: 2}, 3},    // a member
		{identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 5), 20},  // a PoP of the region
		{identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 3), 7},   // its former epoch
		{identity.PoPReplica(self.PoPID, 0x77), 2},                              // the own PoP's former epoch
		{identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 5), 100}, // another region's PoP
		{identity.RegionReplica("us", 8), 300},                                  // another region
		{identity.RegionReplica("eu", 8), 500},                                  // the own region's aggregate
	} {
		id, ok := s.Intern(c.r)
		require.True(t, ok)
		require.Equal(t, Merged, s.Merge(rule, "k", 10, 10, id, c.count), c.r.String())
	}
	got, ok := s.RegionTotal(rule, "k", 10)
	require.True(t, ok)
	assert.Equal(t, uint64(4+3+20+7+2), got)
	_, ok = s.RegionTotal(rule, "k", 13)
	assert.False(t, ok, "a window the key does not hold")
	_, ok = s.RegionTotal(rule, "nope", 10)
	assert.False(t, ok)

	var walked uint64
	s.RegionPart(func(RuleID) int64 { return 10 }, 0, 1, false, func(e FlushEntry) {
		if e.Key == "k" && e.Window == 10 {
			walked = e.PoP
		}
	})
	assert.Equal(t, got, walked, "RegionPart and RegionTotal agree")
}
