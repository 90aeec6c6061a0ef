package crdt

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gcra"
)

// paceResult is a paced decision in full, as the node core derives it from
// the TAT the store decided against.
type paceResult struct {
	gcra.Result
	Untracked bool
}

func pace(st *Store, rule RuleID, key string, now, width int64, r gcra.Rate, cost uint64, count bool) paceResult {
	var res paceResult
	var tat int64
	tat, res.Untracked = st.PaceHashed(st.KeyHash(rule, key), rule, key, now, width, r, cost, count)
	r.Decide(&res.Result, tat, now, cost)
	return res
}

func TestPaceKeepsOneTATPerKey(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, Seed: 1})
	r := gcra.Of(10, int64(time.Second), 3) // 100ms apart, 3 at once
	width := int64(time.Second)
	now := int64(1_000_000) * int64(time.Second)
	for i := range 3 {
		res := pace(st, 1, "a", now, width, r, 1, true)
		require.True(t, res.Allowed, "request %d", i)
		assert.False(t, res.Untracked)
	}
	peek := pace(st, 1, "a", now, width, r, 1, false)
	assert.False(t, peek.Allowed)
	assert.Equal(t, int64(100*time.Millisecond), peek.RetryAfter)
	denied := pace(st, 1, "a", now, width, r, 1, true)
	assert.False(t, denied.Allowed)
	tat, ok := st.PaceTAT(1, "a", width)
	require.True(t, ok)
	assert.Equal(t, now+int64(300*time.Millisecond), tat, "a denial does not move the TAT")

	// Another key and another rule are on their own.
	assert.True(t, pace(st, 1, "b", now, width, r, 3, true).Allowed)
	assert.True(t, pace(st, 2, "a", now, width, r, 3, true).Allowed)

	// Across the store window's edge the TAT is kept whole.
	later := now + width - int64(50*time.Millisecond) // 950ms: the burst is back
	res := pace(st, 1, "a", later, width, r, 3, true)
	require.True(t, res.Allowed)
	next := later + int64(100*time.Millisecond) // in the next store window
	res = pace(st, 1, "a", next, width, r, 1, true)
	assert.True(t, res.Allowed)
	assert.Equal(t, uint64(0), res.Remaining)
	assert.Equal(t, int64(300*time.Millisecond), res.Reset)
	tat, _ = st.PaceTAT(1, "a", width)
	assert.Equal(t, next+int64(300*time.Millisecond), tat)
	assert.False(t, pace(st, 1, "a", next, width, r, 1, true).Allowed)
}

func TestPaceSweepDropsOnlyIdleKeys(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, Seed: 1})
	r := gcra.Of(10, int64(time.Second), 10)
	width := r.Tolerance()
	now := int64(1_000_000) * int64(time.Second)
	require.True(t, pace(st, 1, "a", now, width, r, 10, true).Allowed)
	idx := func(t int64) func(RuleID) int64 { return func(RuleID) int64 { return t / width } }
	assert.Equal(t, 0, st.Sweep(idx(now+width)), "the TAT is still ahead")
	_, ok := st.PaceTAT(1, "a", width)
	require.True(t, ok)
	assert.Equal(t, 1, st.Sweep(idx(now+3*width)))
	_, ok = st.PaceTAT(1, "a", width)
	assert.False(t, ok)
}

// TestPaceWithoutRoom: keys that find no room share one TAT per rule and
// shard, so a flood of new keys gets no more than one key's pace.
func TestPaceWithoutRoom(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, MaxKeys: 4, Seed: 1})
	r := gcra.Of(10, int64(time.Second), 2)
	width := int64(time.Second)
	st.SetProtect(1, 0) // every key is being limited: none is evicted
	now := int64(1_000_000) * int64(time.Second)
	for i := range 4 {
		require.True(t, pace(st, 1, "k"+strconv.Itoa(i), now, width, r, 1, true).Allowed)
	}
	admitted := 0
	for i := range 100 {
		res := pace(st, 1, "flood"+strconv.Itoa(i), now, width, r, 1, true)
		require.True(t, res.Untracked)
		if res.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 2, admitted, "the keys without room share one burst")
	peek := pace(st, 1, "flood-new", now, width, r, 1, false)
	assert.True(t, peek.Untracked)
	assert.False(t, peek.Allowed, "a check agrees with the count")
	assert.Equal(t, uint64(98), st.Stats().UntrackedDenied)
}
