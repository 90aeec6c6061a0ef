package crdt

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// OwnDemand: what this replica admitted of a key in a window, and what it
// denied there, once the key's denials are counted (a hot entry made
// before the window's first denial); unknown otherwise.
func TestOwnDemand(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
	atW := func(win, t int64) Now { return Now{Index: win, Elapsed: t, Width: W} }
	// Window 1: 5 admitted of a limit of 5, then 3 denied: the first
	// denial makes the key's hot entry, which counts it and the rest.
	for range 8 {
		st.AdmitSplit(0, "k", atW(1, ms), 5, 1, true, nil)
	}
	d, ok := st.OwnDemand(0, "k", 1)
	assert.True(t, ok)
	assert.Equal(t, uint64(8), d)
	// Window 2: the previous window's 5 weigh in, 2 admitted and 4 denied
	// (cost 2 each).
	st.AdmitSplit(0, "k", atW(2, W-ms), 7, 1, true, nil)
	st.AdmitSplit(0, "k", atW(2, W-ms), 7, 1, true, nil)
	for range 4 {
		st.AdmitSplit(0, "k", atW(2, W-ms), 7, 2, true, nil)
	}
	d, ok = st.OwnDemand(0, "k", 2)
	assert.True(t, ok)
	assert.Equal(t, uint64(2+8), d)
	d, ok = st.OwnDemand(0, "k", 1)
	assert.True(t, ok, "the previous window is still known")
	assert.Equal(t, uint64(8), d)
	d, ok = st.OwnDemand(0, "k", 3)
	assert.True(t, ok, "a later window: nothing asked yet")
	assert.Zero(t, d)
	_, ok = st.OwnDemand(0, "k", 0)
	assert.False(t, ok, "no longer a live window")
	_, ok = st.OwnDemand(0, "other", 1)
	assert.False(t, ok, "not held")

	// A key far below its limit is denied nothing: its admits are its
	// demand.
	st.AdmitSplit(0, "calm", atW(2, ms), 100, 3, true, nil)
	d, ok = st.OwnDemand(0, "calm", 2)
	assert.True(t, ok)
	assert.Equal(t, uint64(3), d)
}

// A key denied while the hot table is full (the allowance's split evicts
// for an entry, a denial does not) cannot tell that window's demand.
func TestOwnDemandUnknownWhenTheHotTableIsFull(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3, Shards: 1, MaxHotKeys: 1})
	atW := func(win, t int64) Now { return Now{Index: win, Elapsed: t, Width: W} }
	for range 3 {
		st.AdmitSplit(0, "j", atW(1, ms), 1, 1, true, nil) // takes the only entry
	}
	for range 3 {
		st.AdmitSplit(0, "k", atW(1, 2*ms), 1, 1, true, nil) // 1 admitted, 2 denied
	}
	d, ok := st.OwnDemand(0, "j", 1)
	assert.True(t, ok)
	assert.Equal(t, uint64(3), d)
	d, ok = st.OwnDemand(0, "k", 1)
	assert.False(t, ok)
	assert.Equal(t, uint64(1), d, "at least what it admitted")
}
