package crdt

import (
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// arenaLive returns the bytes of the long keys a shard holds.
func arenaLive(sh *shard) int {
	n := 0
	for i := range sh.slots {
		if sl := &sh.slots[i]; sl.flags&flagLive != 0 && sl.klen == longKey {
			_, kn := sl.longRef()
			n += kn
		}
	}
	return n
}

// TestTableShrinksWhenKeysExpire fills a shard with short and long keys of
// two rules, lets one rule's keys expire and sweeps them: the table and the
// arena shrink to what the other rule's keys need, and those keep their
// counts and change marks. Once those expire too the shard is back to its
// initial size.
func TestTableShrinksWhenKeysExpire(t *testing.T) {
	rng := seeded(t, 11)
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, MaxKeys: 1 << 20})
	sh := &st.shards[0]
	name := func(i int) string {
		if i%2 == 0 {
			return "a-long-key-stored-in-the-arena-" + strconv.Itoa(i)
		}
		return "k" + strconv.Itoa(i)
	}
	want := map[string]uint64{}
	for i := range 20000 {
		rule, win := RuleID(0), int64(1)
		if i%10 == 0 {
			rule, win = 1, 5 // the keys that stay
		}
		c := uint64(1 + rng.IntN(5))
		st.Admit(rule, name(i), at(win), 1<<40, c, true)
		if rule == 1 {
			want[name(i)] = c
		}
	}
	big := len(sh.slots)
	require.Greater(t, big, 20000)
	stats := st.Stats()
	assert.Equal(t, big*64, stats.TableBytes)
	if _, mem := mapSlots(big); mem != nil { // a build that maps large tables
		unmap(mem)
		assert.Equal(t, stats.TableBytes, stats.OffHeapBytes, "a large table is outside the heap")
	}
	st.Flush(func(FlushEntry) {})
	for k, c := range want {
		st.Admit(1, k, at(5), 1<<40, c, true) // changed again: marked for the next flush
		want[k] = 2 * c
	}
	now := func(r RuleID) int64 { return map[RuleID]int64{0: 5, 1: 5}[r] }
	require.Equal(t, 18000, st.Sweep(now))
	assert.Equal(t, 2000, sh.used)
	assert.LessOrEqual(t, len(sh.slots), 4*sh.used, "the table shrank")
	assert.Less(t, len(sh.slots), big/4)
	assert.Equal(t, arenaLive(sh), len(sh.arena), "the arena holds the live long keys only")
	for k, c := range want {
		views, ok := st.View(1, k, 5)
		require.True(t, ok, k)
		assert.Equal(t, c, views[len(views)-1].Total, k)
	}
	flushed := map[string]uint64{}
	st.Flush(func(e FlushEntry) { flushed[e.Key] = e.Count })
	assert.Equal(t, want, flushed, "the change marks moved with the slots")

	assert.Equal(t, 2000, st.Sweep(func(RuleID) int64 { return 9 }))
	assert.Equal(t, initialSlots, len(sh.slots))
	assert.Empty(t, sh.arena)
	assert.Zero(t, st.Stats().OffHeapBytes, "the mappings went back")
}

// TestArenaStaysBounded churns long keys through a full shard: evictions
// leave dead bytes in the arena, which compaction keeps under half of it
// (or under minArenaDead), while every held key is still found.
func TestArenaStaysBounded(t *testing.T) {
	rng := seeded(t, 12)
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, MaxKeys: 500})
	st.SetProtect(0, 1<<40) // nothing is being limited: all may be evicted
	sh := &st.shards[0]
	for i := range 20000 {
		k := "user:" + strconv.Itoa(rng.IntN(1<<30)) + "-" + strconv.Itoa(i)
		require.True(t, st.Admit(0, k, at(1), 1<<40, 1, true).Allowed)
		require.True(t, held(st, sh, 0, k), "step %d", i)
		if i%16 != 0 {
			continue
		}
		live := arenaLive(sh)
		require.Equal(t, live+sh.arenaDead, len(sh.arena), "step %d", i)
		require.LessOrEqual(t, sh.arenaDead, max(minArenaDead, live)+64, "step %d", i)
	}
	assert.Equal(t, 500, st.Stats().Keys)
}

// TestHashBytesIsHash: moving and removing slots hashes keys as bytes,
// deciding hashes them as strings; both must agree, seeded or not.
func TestHashBytesIsHash(t *testing.T) {
	for _, seed := range []uint64{0, 42} {
		st := NewStore(StoreConfig{Self: rep("self", 1), Seed: seed})
		for _, k := range []string{"", "k", "203.0.113.7", "a-key-longer-than-a-slot-holds"} {
			for _, r := range []RuleID{0, 7} {
				assert.Equal(t, st.hash(r, k), st.hashBytes(r, []byte(k)), "seed %d, rule %d, %q", seed, r, k)
			}
		}
	}
}

// TestShardLayout checks what Store.Hash relies on: a merge's fields in the
// shard's first two cache lines, and shards of whole lines.
func TestShardLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is laid out for 64-bit machines")
	}
	var sh shard
	assert.Zero(t, unsafe.Sizeof(sh)%64, "shard size %d", unsafe.Sizeof(sh))
	assert.Less(t, unsafe.Offsetof(sh.slots)+unsafe.Sizeof(sh.slots), uintptr(64))
	assert.Less(t, unsafe.Offsetof(sh.work), uintptr(64))
	assert.Less(t, unsafe.Offsetof(sh.budgeted), uintptr(64))
	assert.Equal(t, uintptr(64), unsafe.Offsetof(sh.side))
	assert.LessOrEqual(t, unsafe.Offsetof(sh.arena)+unsafe.Sizeof(sh.arena), uintptr(128))
}
