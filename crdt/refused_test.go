package crdt

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A rule counted so (SetCountRefused) counts the cost it refuses, per
// window, until TakeRefused hands it out; each key at most refusedCap
// times its limit a window. Admits add nothing.
func TestTakeRefused(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	atW := func(win, t int64) Now { return Now{Index: win, Elapsed: t, Width: W} }
	st.SetCountRefused(1, true)
	// Window 1: rule 1's key a at a limit of 5: 5 admitted, then 3
	// refused at cost 2; key b: 30 refused of a limit of 5 count 10.
	for range 5 {
		assert.True(t, st.Admit(1, "a", atW(1, ms), 5, 1, true).Allowed)
	}
	for range 3 {
		assert.False(t, st.Admit(1, "a", atW(1, ms), 5, 2, true).Allowed)
	}
	for range 35 {
		st.Admit(1, "b", atW(1, ms), 5, 1, true)
	}
	// Rule 0 is not counted.
	for range 8 {
		st.Admit(0, "a", atW(1, ms), 5, 1, true)
	}
	assert.Equal(t, uint64(6+10), st.TakeRefused(1, 1))
	assert.Zero(t, st.TakeRefused(1, 1), "taken")
	assert.Zero(t, st.TakeRefused(0, 1), "not counted")

	// Key b is still capped in window 1: it counted its 10.
	st.Admit(1, "b", atW(1, 2*ms), 5, 1, true)
	assert.Zero(t, st.TakeRefused(1, 1))

	// A window not taken before the next is forgotten uncounted.
	assert.False(t, st.Admit(1, "a", atW(2, ms), 5, 4, true).Allowed) // the previous window's 5 weigh in
	assert.Zero(t, st.TakeRefused(1, 3))
	assert.False(t, st.Admit(1, "a", atW(3, ms), 5, 6, true).Allowed)
	assert.Equal(t, uint64(6), st.TakeRefused(1, 3))

	// Off again: nothing counted.
	st.SetCountRefused(1, false)
	st.Admit(1, "a", atW(3, ms), 5, 6, true)
	assert.Zero(t, st.TakeRefused(1, 3))
}

// A dropped rule stops counting: its ID may serve a rule that does not.
func TestDropRuleStopsCountingRefused(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	st.SetProtect(1, 3)
	st.SetCountRefused(1, true)
	st.DropRule(1)
	at := Now{Index: 1, Elapsed: ms, Width: W}
	for range 10 {
		st.Admit(1, "a", at, 5, 1, true)
	}
	assert.Zero(t, st.TakeRefused(1, 1))
}
