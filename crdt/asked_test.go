package crdt

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A rule counted so (SetCountAsked) counts the cost it was asked, admitted
// or refused, and the cost it refused, per window, until TakeAsked hands
// them out; each key's refused cost at most refusedCap times the rule's
// limit a window. The window before the current one is handed out too.
func TestTakeAsked(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	atW := func(win, t int64) Now { return Now{Index: win, Elapsed: t, Width: W} }
	st.SetCountAsked(1, 5)
	// Window 1: rule 1's key a at a limit of 5: 5 admitted, then 3
	// refused at cost 2; key b: 5 admitted and 30 refused of a limit of
	// 5, which count 10.
	for range 5 {
		assert.True(t, st.Admit(1, "a", atW(1, ms), 5, 1, true).Allowed)
	}
	for range 3 {
		assert.False(t, st.Admit(1, "a", atW(1, ms), 5, 2, true).Allowed)
	}
	for range 35 {
		st.Admit(1, "b", atW(1, ms), 5, 1, true)
	}
	// A check counts nothing; rule 0 is not counted.
	st.Admit(1, "c", atW(1, ms), 5, 1, false)
	for range 8 {
		st.Admit(0, "a", atW(1, ms), 5, 1, true)
	}
	assert.Equal(t, Asked{Asked: [2]uint64{0, 5 + 6 + 5 + 10}, Refused: [2]uint64{0, 6 + 10}}, st.TakeAsked(1, 1))
	assert.Equal(t, Asked{}, st.TakeAsked(1, 1), "taken")
	assert.Equal(t, Asked{}, st.TakeAsked(0, 1), "not counted")

	// Key b is still capped in window 1: it counted its 10, and a request
	// refused past them adds nothing, asked or refused.
	st.Admit(1, "b", atW(1, 2*ms), 5, 1, true)
	assert.Equal(t, Asked{}, st.TakeAsked(1, 1))

	// What was asked at the end of window 2 and taken in window 3 is
	// handed out as window 2's; window 1's, never taken, is forgotten.
	st.Admit(1, "c", atW(1, 3*ms), 5, 2, true)
	assert.False(t, st.Admit(1, "a", atW(2, ms), 5, 4, true).Allowed) // the previous window's 5 weigh in
	assert.Equal(t, Asked{Asked: [2]uint64{4, 0}, Refused: [2]uint64{4, 0}}, st.TakeAsked(1, 3))
	assert.False(t, st.Admit(1, "a", atW(3, ms), 5, 6, true).Allowed)
	assert.True(t, st.Admit(1, "c", atW(3, ms), 5, 2, true).Allowed)
	assert.Equal(t, Asked{Asked: [2]uint64{0, 6 + 2}, Refused: [2]uint64{0, 6}}, st.TakeAsked(1, 3))

	// Off again: nothing counted.
	st.SetCountAsked(1, 0)
	st.Admit(1, "a", atW(3, ms), 5, 1, true)
	assert.Equal(t, Asked{}, st.TakeAsked(1, 3))
}

// CountPrevHashed adds to the window before now's, wherever the key's
// windows stand; CountIn reads one window exactly, own and picked remote
// counts.
func TestCountPrevAndCountIn(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	h := st.Hash(1, "k")
	at := func(win int64) Now { return Now{Index: win, Elapsed: ms, Width: W} }
	st.CountHashed(h, 1, "k", at(1), 3)
	st.CountPrevHashed(h, 1, "k", at(2), 2) // the key still in window 1
	c, ok := st.CountIn(1, "k", 1, func(ReplicaID) bool { return true })
	assert.True(t, ok)
	assert.Equal(t, uint64(5), c)
	st.CountHashed(h, 1, "k", at(2), 7)
	st.CountPrevHashed(h, 1, "k", at(2), 1) // now rolled to window 2
	c, _ = st.CountIn(1, "k", 1, func(ReplicaID) bool { return true })
	assert.Equal(t, uint64(6), c)
	c, _ = st.CountIn(1, "k", 2, func(ReplicaID) bool { return true })
	assert.Equal(t, uint64(7), c)
	st.CountPrevHashed(h, 1, "k", at(4), 9) // windows past it: nothing
	c, _ = st.CountIn(1, "k", 3, func(ReplicaID) bool { return true })
	assert.Zero(t, c)
	other := rep("other", 1)
	id, _ := st.Intern(other)
	st.Merge(1, "k", 2, 2, id, 4)
	c, _ = st.CountIn(1, "k", 2, func(ReplicaID) bool { return true })
	assert.Equal(t, uint64(11), c)
	c, _ = st.CountIn(1, "k", 2, func(ReplicaID) bool { return false })
	assert.Equal(t, uint64(7), c, "the own count, the remote one left out")
	_, ok = st.CountIn(1, "none", 2, func(ReplicaID) bool { return true })
	assert.False(t, ok)
}

// A dropped rule stops counting, and forgets what it counted: its ID may
// serve a rule that does not count, or one of other windows.
func TestDropRuleStopsCountingAsked(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	st.SetProtect(1, 3)
	st.SetCountAsked(1, 5)
	st.DropRule(1)
	at := Now{Index: 1, Elapsed: ms, Width: W}
	for range 10 {
		st.Admit(1, "a", at, 5, 1, true)
	}
	assert.Equal(t, Asked{}, st.TakeAsked(1, 1))

	// The ID serves a rule of longer windows, whose indexes are smaller
	// than the dropped rule's: it counts from nothing.
	st.SetCountAsked(2, 5)
	st.Admit(2, "a", Now{Index: 1000, Elapsed: ms, Width: W}, 5, 1, true)
	st.DropRule(2)
	st.SetCountAsked(2, 5)
	st.Admit(2, "b", Now{Index: 10, Elapsed: ms, Width: W}, 5, 1, true)
	assert.Equal(t, Asked{Asked: [2]uint64{0, 1}}, st.TakeAsked(2, 10))
}

// The shard stays whole cache lines: its padding follows its fields.
func TestShardIsWholeCacheLines(t *testing.T) {
	assert.Zero(t, unsafe.Sizeof(shard{})%64)
}

// A key's refused cost counts up to refusedCap times the rule's limit set
// with SetCountAsked, not the limit a decision passes: a partition's share
// passes less, and the side's demand in the cut must read as it did
// before.
func TestAskedCapIsTheRulesLimit(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	st.SetCountAsked(1, 20)
	at := Now{Index: 1, Elapsed: ms, Width: W}
	for range 100 {
		st.Admit(1, "a", at, 5, 1, true) // a share of 5 of the limit of 20
	}
	assert.Equal(t, Asked{Asked: [2]uint64{0, 5 + 40}, Refused: [2]uint64{0, 40}}, st.TakeAsked(1, 1))
}
