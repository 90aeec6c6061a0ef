package crdt

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A rule counted so (SetCountAsked) counts the cost it was asked, admitted
// or refused, per window, until TakeAsked hands it out; each key's refused
// cost at most refusedCap times its limit a window.
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
	assert.Equal(t, uint64(5+6+5+10), st.TakeAsked(1, 1))
	assert.Zero(t, st.TakeAsked(1, 1), "taken")
	assert.Zero(t, st.TakeAsked(0, 1), "not counted")

	// Key b is still capped in window 1: it counted its 10.
	st.Admit(1, "b", atW(1, 2*ms), 5, 1, true)
	assert.Zero(t, st.TakeAsked(1, 1))

	// A window not taken before the next is forgotten uncounted.
	assert.False(t, st.Admit(1, "a", atW(2, ms), 5, 4, true).Allowed) // the previous window's 5 weigh in
	assert.Zero(t, st.TakeAsked(1, 3))
	assert.False(t, st.Admit(1, "a", atW(3, ms), 5, 6, true).Allowed)
	assert.True(t, st.Admit(1, "a", atW(3, ms), 5, 2, true).Allowed)
	assert.Equal(t, uint64(6+2), st.TakeAsked(1, 3))

	// Off again: nothing counted.
	st.SetCountAsked(1, 0)
	st.Admit(1, "a", atW(3, ms), 5, 1, true)
	assert.Zero(t, st.TakeAsked(1, 3))
}

// A dropped rule stops counting: its ID may serve a rule that does not.
func TestDropRuleStopsCountingAsked(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	st.SetProtect(1, 3)
	st.SetCountAsked(1, 5)
	st.DropRule(1)
	at := Now{Index: 1, Elapsed: ms, Width: W}
	for range 10 {
		st.Admit(1, "a", at, 5, 1, true)
	}
	assert.Zero(t, st.TakeAsked(1, 1))
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
	assert.Equal(t, uint64(5+40), st.TakeAsked(1, 1))
}
