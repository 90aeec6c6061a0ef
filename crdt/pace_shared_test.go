package crdt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gcra"
)

// TestCountHashedCountsWithoutDeciding: an admission decided elsewhere is
// counted in the own window and marked for Flush, whatever the count.
func TestCountHashedCountsWithoutDeciding(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, Seed: 1})
	h := st.KeyHash(1, "k")
	for range 3 {
		require.True(t, st.CountHashed(h, 1, "k", at(10), 5))
	}
	vs, ok := st.View(1, "k", 10)
	require.True(t, ok)
	require.Len(t, vs, 1)
	assert.Equal(t, uint64(15), vs[0].Total)
	var flushed uint64
	st.FlushAt(0, 0, func(e FlushEntry) { flushed += e.Count })
	assert.Equal(t, uint64(15), flushed)
	// The next window rolls the key on.
	require.True(t, st.CountHashed(h, 1, "k", at(11), 1))
	vs, _ = st.View(1, "k", 11)
	require.Len(t, vs, 2)
	assert.Equal(t, uint64(1), vs[1].Total)
}

// TestMergeHashedDiffReportsTheIncrease: the increase of a replica's count,
// once; nothing for a duplicate, an older count, a stale window or self.
func TestMergeHashedDiffReportsTheIncrease(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, Seed: 1})
	b, ok := st.Intern(rep("b", 1))
	require.True(t, ok)
	h := st.KeyHash(1, "k")
	for _, tc := range []struct {
		name     string
		win      int64
		rep      ReplicaID
		count    uint64
		outcome  MergeOutcome
		increase uint64
	}{
		{"new entry", 10, b, 4, Merged, 4},
		{"raised", 10, b, 7, Merged, 3},
		{"duplicate", 10, b, 7, Unchanged, 0},
		{"older", 10, b, 5, Unchanged, 0},
		{"other window", 9, b, 2, Merged, 2},
		{"stale window", 8, b, 9, Stale, 0},
		{"self", 10, SelfID, 9, Self, 0},
	} {
		o, d := st.MergeHashedDiff(h, 1, "k", 10, tc.win, tc.rep, tc.count)
		assert.Equal(t, tc.outcome, o, tc.name)
		assert.Equal(t, tc.increase, d, tc.name)
	}
}

// TestPaceAddHashedMovesTheTAT: an unchecked admission moves the TAT from
// now (an empty bucket) or from the TAT ahead of now, and PaceHashed then
// decides by it.
func TestPaceAddHashedMovesTheTAT(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, Seed: 1})
	r := gcra.Of(10, int64(time.Second), 3) // 100ms apart, 3 at once
	width := r.Tolerance()
	now := int64(1_000_000) * int64(time.Second)
	h := st.KeyHash(2, "k")
	st.PaceAddHashed(h, 2, "k", now, width, r, 2)
	tat, ok := st.PaceTAT(2, "k", width)
	require.True(t, ok)
	assert.Equal(t, now+int64(200*time.Millisecond), tat)
	st.PaceAddHashed(h, 2, "k", now+int64(50*time.Millisecond), width, r, 2) // over the burst: unchecked
	tat, _ = st.PaceTAT(2, "k", width)
	assert.Equal(t, now+int64(400*time.Millisecond), tat)
	res := pace(st, 2, "k", now+int64(50*time.Millisecond), width, r, 1, true)
	assert.False(t, res.Allowed)
	assert.Equal(t, int64(150*time.Millisecond), res.RetryAfter)
	// Long after, the bucket is empty again: the TAT moves from now.
	later := now + 10*width
	st.PaceAddHashed(h, 2, "k", later, width, r, 1)
	tat, _ = st.PaceTAT(2, "k", width)
	assert.Equal(t, later+int64(100*time.Millisecond), tat)
}
