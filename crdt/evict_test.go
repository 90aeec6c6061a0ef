package crdt

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// admitUntil sends requests of key until one is denied and returns how many
// were admitted (at most max+1 tries).
func admitUntil(st *Store, rule RuleID, key string, now Now, limit uint64, max int) (admitted int, untracked bool) {
	for range max + 1 {
		r := st.Admit(rule, key, now, limit, 1, true)
		untracked = untracked || r.Untracked
		if !r.Allowed {
			break
		}
		admitted++
	}
	return admitted, untracked
}

// TestFloodOfOneRuleLeavesOthersRoom fills a store with keys of one rule,
// each pushed to its limit, then asks for new keys of another rule: they
// take back their rule's share from the flood and are limited exactly.
func TestFloodOfOneRuleLeavesOthersRoom(t *testing.T) {
	rng := seeded(t, 7)
	const maxKeys, limit = 512, 10
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: maxKeys, Shards: 4, Seed: 3})
	st.SetProtect(0, limit/2+1)
	st.SetProtect(1, limit/2+1)
	for i := 0; i < 4*maxKeys; i++ {
		k := fmt.Sprintf("f%d", rng.Uint64())
		for range limit {
			st.Admit(0, k, at(1), limit, 1, true)
		}
	}
	require.Equal(t, maxKeys, st.Stats().Keys, "the flood fills the store")
	require.Positive(t, st.Stats().Overflow, "and overflows it")
	for i := range maxKeys / 4 {
		n, untracked := admitUntil(st, 1, "victim"+strconv.Itoa(i), at(1), limit, 2*limit)
		require.False(t, untracked, "key %d of a rule within its share", i)
		require.Equal(t, limit, n, "key %d", i)
	}
	assert.LessOrEqual(t, st.Stats().Keys, maxKeys)
	assert.Equal(t, maxKeys/4, st.KeysByRule()[1])
}

// TestUntrackedKeysShareTheLimit: when every key is being limited and
// nothing can be evicted, new keys are decided by their rule's aggregate in
// the shard, so no new key gets more than the limit, nor do all of them
// together per shard.
func TestUntrackedKeysShareTheLimit(t *testing.T) {
	const limit = 10
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 4, Shards: 1})
	st.SetProtect(0, limit/2+1)
	for i := range 4 {
		for range limit {
			st.Admit(0, "k"+strconv.Itoa(i), at(1), limit, 1, true)
		}
	}
	admitted := 0
	for i := range 100 {
		r := st.Admit(0, "new"+strconv.Itoa(i%7), at(1), limit, 1, true)
		require.True(t, r.Untracked, "request %d", i)
		if r.Allowed {
			admitted++
		}
	}
	assert.Equal(t, limit, admitted, "the keys without room share one limit")
	assert.Equal(t, uint64(100-limit), st.Stats().UntrackedDenied)
	_, ok := st.View(0, "new1", 1)
	assert.False(t, ok, "nothing stored")
	// The aggregate slides like a key's count: a window later half of it
	// is left (elapsed W/2), two windows later none.
	n, untracked := admitUntil(st, 0, "later", at(2), limit, 2*limit)
	assert.True(t, untracked)
	assert.Equal(t, limit/2, n)
}

// TestDeniedKeyKeepsItsPlace: a key denied in its live windows is being
// limited whatever its count (a cost near the limit), and is not evicted
// for a new key; a window with no denial later, it may be.
func TestDeniedKeyKeepsItsPlace(t *testing.T) {
	const limit = 10
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 1, Shards: 1})
	st.SetProtect(0, limit/2+1)
	require.True(t, st.Admit(0, "big", at(1), limit, 4, true).Allowed)
	require.False(t, st.Admit(0, "big", at(1), limit, 7, true).Allowed)
	r := st.Admit(0, "new", at(1), limit, 1, true)
	assert.True(t, r.Untracked, "the denied key keeps its place")
	_, ok := st.View(0, "big", 1)
	assert.True(t, ok)
	// Two windows later its denial has passed and so has its count.
	r = st.Admit(0, "new", at(3), limit, 1, true)
	assert.False(t, r.Untracked)
}

// TestEvictedLimitedKeyLeavesItsCount: a borrower's key evicted while being
// limited leaves its counts in its rule's aggregate, so coming back without
// room does not start it afresh.
func TestEvictedLimitedKeyLeavesItsCount(t *testing.T) {
	const limit = 10
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 2, Shards: 1})
	st.SetProtect(0, limit/2+1)
	st.SetProtect(1, limit/2+1)
	for _, k := range []string{"a", "b"} {
		n, _ := admitUntil(st, 0, k, at(1), limit, limit)
		require.Equal(t, limit, n)
	}
	// Rule 1 is owed its share (one key): it takes a place from rule 0.
	n, untracked := admitUntil(st, 1, "v", at(1), limit, limit)
	assert.False(t, untracked)
	assert.Equal(t, limit, n)
	assert.Equal(t, uint64(1), st.Stats().Evicted)
	// Rule 0 is at its share now: its evicted key comes back, to its
	// count in the rule's sketch (and, without room, to an aggregate that
	// holds it too).
	for _, k := range []string{"a", "b"} {
		if _, ok := st.View(0, k, 1); !ok {
			r := st.Admit(0, k, at(1), limit, 1, true)
			assert.False(t, r.Allowed, "its count came along")
		}
	}
}

// TestRoomProperty drives a one-shard store with seeded random traffic on
// three rules of random limits, which start one after the other: a flood of
// keys, each sent a burst of random size (many reach their limit), all in
// one instant. After every
// request it checks, against the store's state before it: at most MaxKeys
// keys; a key being limited is gone only if its rule held borrowed room
// and the request's rule was owed room; a rule loses keys to another rule
// only from room beyond its share; and the keys without room of a rule are
// admitted at most its limit together.
func TestRoomProperty(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := seeded(t, seed)
			const rules = 3
			maxKeys := 16 + rng.IntN(256)
			st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: maxKeys, Shards: 1, Seed: seed})
			var limits [rules]uint64
			for r := range rules {
				limits[r] = uint64(2 + rng.IntN(20))
				st.SetProtect(RuleID(r), limits[r]/2+1)
			}
			share := st.rules.Load().share(maxKeys)
			sh := &st.shards[0]
			var untracked [rules]uint64
			limitedEvicted := 0
			for step := range 1200 {
				// Rule 0 first, then 0 and 1, then all: rules borrow room
				// and others take it back.
				r := RuleID(rng.IntN(min(1+step/400, rules)))
				k := "f" + strconv.Itoa(rng.IntN(4*maxKeys))
				var before []wkey
				if sh.used == sh.cap { // only a full shard evicts
					before = limitedKeys(st, sh)
				}
				count := make([]int, rules)
				copy(count, sh.count)
				// A burst: the key's first request may evict, the others
				// push it towards its limit.
				for range 1 + rng.IntN(int(limits[r])) {
					if res := st.Admit(r, k, at(1), limits[r], 1, true); res.Untracked && res.Allowed {
						untracked[r]++
					}
				}
				require.LessOrEqual(t, sh.used, maxKeys)
				for x := range count {
					if x < len(sh.count) && sh.count[x] < count[x] && RuleID(x) != r {
						require.Greater(t, count[x], share, "step %d: rule %d lost a key of its share to rule %d", step, x, r)
					}
				}
				for _, wk := range before {
					if held(st, sh, wk.rule, wk.key) {
						continue
					}
					limitedEvicted++
					require.NotEqual(t, r, wk.rule, "step %d: %v, being limited, evicted for its own rule", step, wk)
					require.Greater(t, count[wk.rule], share, "step %d: %v taken from its rule's share", step, wk)
					require.Less(t, count[r], share, "step %d: %v, being limited, evicted for a rule not owed room", step, wk)
				}
			}
			t.Logf("%d keys being limited evicted, %+v", limitedEvicted, st.Stats())
			for r := range rules {
				assert.LessOrEqual(t, untracked[r], limits[r], "rule %d: keys without room", r)
			}
		})
	}
}

// held reports whether a shard holds (rule, key).
func held(st *Store, sh *shard, rule RuleID, key string) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.find(st.hash(rule, key), rule, key)
	return ok
}

// limitedKeys returns the keys of a shard that are being limited.
func limitedKeys(st *Store, sh *shard) []wkey {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []wkey
	t := st.rules.Load()
	for i := range sh.slots {
		if sl := &sh.slots[i]; sl.flags&flagLive != 0 && t.limited(sl) {
			out = append(out, wkey{rule: sl.rule, key: sh.keyOf(int32(i))})
		}
	}
	return out
}
