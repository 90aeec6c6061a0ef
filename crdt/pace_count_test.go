package crdt

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gcra"
)

// TestRuleHashSameShard: every rule's hash of a key lies in the key's
// shard, and RuleHash derives one rule's from another's.
func TestRuleHashSameShard(t *testing.T) {
	for r := range RuleID(MaxRules) {
		require.Zero(t, ruleMix(r)>>(64-maxShardBits), "rule %d reaches the shard bits", r)
	}
	for _, seed := range []uint64{0, 7} {
		st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1024, Seed: seed})
		for i := range 200 {
			key := "10.0.0." + strconv.Itoa(i)
			h0 := st.KeyHash(0, key)
			for _, r := range []RuleID{1, 2, 77, MaxRules - 1} {
				h := st.KeyHash(r, key)
				require.Equal(t, h, RuleHash(h0, 0, r), "seed %d key %s rule %d", seed, key, r)
				require.Same(t, st.shardOf(h0), st.shardOf(h), "seed %d key %s rule %d", seed, key, r)
			}
		}
	}
}

// TestPaceCountHashed: one call paces a key and counts its admissions for
// Flush, as PaceHashed then CountHashed would; a denial counts nothing.
func TestPaceCountHashed(t *testing.T) {
	const paced, counted RuleID = 2, 1
	rate := gcra.Of(3, int64(time.Minute), 3) // one every 20 s, 3 at once
	width := rate.Tolerance()
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 4, Seed: 1})
	hc := st.KeyHash(counted, "k")
	hp := RuleHash(hc, counted, paced)
	now := int64(10 * time.Minute)
	idx := now / width
	var res gcra.Result
	for i := range 4 {
		tat, untracked, ok := st.PaceCountHashed(hp, paced, hc, counted, "k", now, idx, width, rate, at(10), 1)
		require.True(t, ok)
		require.False(t, untracked)
		rate.Decide(&res, tat, now, 1)
		assert.Equal(t, i < 3, res.Allowed, "request %d", i+1)
	}
	assert.Equal(t, 20*time.Second, time.Duration(res.RetryAfter))
	tat, ok := st.PaceTAT(paced, "k", width)
	require.True(t, ok)
	assert.Equal(t, now+3*rate.Interval, tat)
	vs, ok := st.View(counted, "k", 10)
	require.True(t, ok)
	require.Len(t, vs, 1)
	assert.Equal(t, uint64(3), vs[0].Total, "the three admissions, not the denial")
	var flushed uint64
	st.FlushAt(0, 0, func(e FlushEntry) { flushed += e.Count })
	assert.Equal(t, uint64(3), flushed)
}
