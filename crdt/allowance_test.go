package crdt

import (
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = int64(time.Millisecond)

// split is the allowance the tests use: four replicas, 100ms horizon.
var split = &Allowance{Horizon: 100 * ms, PoPs: 4}

// nowAt is the instant t of window 1 (t is its elapsed time); abs(t) is
// the same instant as FlushAt takes it.
func nowAt(t int64) Now { return Now{Index: 1, Elapsed: t, Width: W} }

func abs(t int64) int64 { return W + t }

// admitAll admits cost-1 requests of key at t until one is denied, and
// returns how many were admitted and the denial.
func admitAll(t *testing.T, st *Store, key string, at int64, a *Allowance) (int, AdmitResult) {
	t.Helper()
	for n := 0; n < 1000; n++ {
		if r := st.AdmitSplit(0, key, nowAt(at), 100, 1, true, a); !r.Allowed {
			return n, r
		}
	}
	t.Fatal("never denied")
	return 0, AdmitResult{}
}

// withOthers returns a store holding count for each of pops' aggregates of
// key in window 1, deciding since window 0 (settled).
func withOthers(t *testing.T, key string, count uint64, pops ...string) *Store {
	t.Helper()
	st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: 3}))
	for _, p := range pops {
		id, ok := st.Intern(identity.PoPReplica(identity.PoPID{Region: "far", PoP: p}, 1))
		require.True(t, ok)
		require.Equal(t, Merged, st.Merge(0, key, 1, 1, id, count))
	}
	return st
}

// settled returns st as a store that has decided with an allowance since
// the start of window 0, a window before the tests' decisions: it reads
// the trailing rate over a window, as a store of a running fleet does (see
// the cold start in allowance_cold.go).
func settled(st *Store) *Store {
	st.noteBorn(0)
	return st
}

// Near the limit a replica keeps unseen at most its share of the headroom
// the others know of; once a flush is older than the horizon its admits
// count as seen and the replica may spend again.
func TestSplitHoldsUnseenAdmitsToShare(t *testing.T) {
	st := withOthers(t, "k", 20, "a", "b", "c") // the others: 60 of 100
	t0 := time.Second.Nanoseconds()
	// No own admit is seen yet: K = 60, H = 40, share 1/4 (the floor): 10.
	n, r := admitAll(t, st, "k", t0, split)
	assert.Equal(t, 10, n)
	assert.Zero(t, r.Remaining)
	assert.Equal(t, 100*ms, r.RetryAfter, "nothing flushed yet: a horizon")
	assert.Equal(t, 1, st.Stats().HotKeys)

	t1 := t0 + 10*ms
	st.FlushAt(abs(t1), split.Horizon, func(FlushEntry) {})
	n, r = admitAll(t, st, "k", t1+50*ms, split)
	assert.Zero(t, n, "the flush is not held by the others yet")
	assert.Equal(t, 50*ms, r.RetryAfter, "until the flush is")

	// At t1+horizon the 10 are seen: K = 70, own share 10/70 < 1/4, so
	// H = 30 and the share 7.5: 7 more.
	n, _ = admitAll(t, st, "k", t1+100*ms, split)
	assert.Equal(t, 7, n)
	_, curr := totals(st, 0, "k", 1)
	assert.Equal(t, uint64(60+17), curr)
}

// A replica whose path to the others is quicker than the fleet's slowest
// (Reach) scales its share by the two lags: its unseen admits are held
// sooner, and at the limit it would otherwise admit its share more often.
// Below half the limit, or in a rushed cold start, it does not.
func TestSplitPacedByReach(t *testing.T) {
	t0 := time.Second.Nanoseconds()
	for _, c := range []struct {
		others uint64 // each of three PoPs
		reach  int64
		want   int
	}{
		// K = 60 others + 15 own held = 75, H = 25, share 1/4: 6.25.
		{20, 0, 6}, {20, split.Horizon, 6}, {20, 2 * split.Horizon, 3},
		{20, 4 * split.Horizon, 2}, // 1.56, and a calm replica's pooled room
		// Below half the limit: K = 45, H = 55, the same with or without
		// a reach (13.75, and the spare room below half).
		{10, 0, 18}, {10, 4 * split.Horizon, 18},
	} {
		st := withOthers(t, "k", c.others, "a", "b", "c")
		for range 15 {
			require.True(t, st.AdmitSplit(0, "k", nowAt(t0), 100, 1, true, nil).Allowed)
		}
		st.FlushAt(abs(t0), split.Horizon, func(FlushEntry) {})
		a := *split
		a.Reach = c.reach
		n, _ := admitAll(t, st, "k", t0+2*split.Horizon, &a)
		assert.Equal(t, c.want, n, "others %d, reach %dms", c.others, c.reach/ms)
	}
	// Half a flush interval waits before the horizon at both.
	a := Allowance{Horizon: 100 * ms, PoPs: 4, Reach: 150 * ms}
	assert.InDelta(t, 125.0/175, a.pace(50*ms), 1e-9)
}

// A replica's share is its part of the counts everyone holds, when above
// an equal split.
func TestSplitShareFollowsCounts(t *testing.T) {
	st := withOthers(t, "k", 10, "a", "b", "c") // 30
	t0 := time.Second.Nanoseconds()
	// Nothing unseen: one request, whatever its cost.
	require.True(t, st.AdmitSplit(0, "k", nowAt(t0), 100, 50, true, split).Allowed)
	// 50 unseen, over 1/4 of H = 70: denied, and the key is hot.
	require.False(t, st.AdmitSplit(0, "k", nowAt(t0), 100, 1, true, split).Allowed)
	st.FlushAt(abs(t0+ms), split.Horizon, func(FlushEntry) {})
	// Seen: 50 of K = 80, so 5/8 of H = 20: 12.5, 12 more.
	n, _ := admitAll(t, st, "k", t0+ms+split.Horizon, split)
	assert.Equal(t, 12, n)
}

// The counts of excluded replicas (PoPs counted as partitioned) are left
// out of the shares: a side splits its headroom among its own replicas.
func TestSplitLeavesExcludedCountsOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exclude func(identity.Replica) bool
		want    int
	}{
		// Seen own 10 of K = 70: 1/4 of H = 30, 7.
		{"none", nil, 7},
		// Without a and b: 10 of 30, a third of 30: 10.
		{"two of three", func(r identity.Replica) bool { return r.PoP == "a" || r.PoP == "b" }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := withOthers(t, "k", 20, "a", "b", "c")
			st.SetExcluded(tc.exclude)
			t0 := time.Second.Nanoseconds()
			n, _ := admitAll(t, st, "k", t0, split)
			require.Equal(t, 10, n)
			st.FlushAt(abs(t0), split.Horizon, func(FlushEntry) {})
			n, _ = admitAll(t, st, "k", t0+split.Horizon, split)
			assert.Equal(t, tc.want, n)
		})
	}
}

// A replica interned after SetExcluded is excluded if the predicate says
// so; SetExcluded(nil) excludes nothing again.
func TestExcludedFollowsInterning(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	st.SetExcluded(func(r identity.Replica) bool { return r.PoP == "iad" })
	iad, _ := st.Intern(identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1))
	sin, _ := st.Intern(identity.PoPReplica(identity.PoPID{Region: "ap", PoP: "sin"}, 1))
	member, _ := st.Intern(rep("ams-2", 1))
	ex := st.excluded.Load()
	require.NotNil(t, ex)
	assert.True(t, ex.has(iad))
	assert.False(t, ex.has(sin))
	assert.False(t, ex.has(member))
	st.SetExcluded(nil)
	assert.Nil(t, st.excluded.Load())
}

// Far from the limit no key gets allowance state, and with nothing unseen
// one request is always admitted (the shares are fractions of units).
func TestSplitFarFromLimitAndOneInFlight(t *testing.T) {
	st := withOthers(t, "k", 30, "a", "b", "c") // 90 of 100
	many := &Allowance{Horizon: 100 * ms, PoPs: 40}
	t0 := time.Second.Nanoseconds()
	for i := range 5 {
		key := "far" + strconv.Itoa(i)
		for range 2 {
			require.True(t, st.AdmitSplit(0, key, nowAt(t0), 1000, 1, true, many).Allowed)
		}
	}
	assert.Zero(t, st.Stats().HotKeys, "keys far from the limit hold no allowance state")
	// 1/40 of H = 10 is a quarter of a request: one, and a second while
	// this replica refused nothing (secondInFlight); once it refused, one.
	n, _ := admitAll(t, st, "k", t0, many)
	assert.Equal(t, 2, n)
	assert.Equal(t, 1, st.Stats().HotKeys)
	n, _ = admitAll(t, st, "k", t0+ms, many)
	assert.Zero(t, n, "refused a millisecond ago: no second in flight")
	// Without an allowance the estimate alone decides: 8 more.
	n, _ = admitAll(t, st, "k", t0, nil)
	assert.Equal(t, 8, n)
	for _, a := range []*Allowance{{Horizon: 0, PoPs: 4}, {Horizon: ms, PoPs: 1}} {
		assert.False(t, a.on())
	}
}

// The hot table is bounded: a key that finds it full evicts the least
// recently used entry; with no room at all (MaxHotKeys < 0) a key near its
// limit is decided as if all its own counts were unseen.
func TestHotTableBounded(t *testing.T) {
	st := settled(NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, MaxHotKeys: 2, Seed: 1}))
	t0 := time.Second.Nanoseconds()
	id, _ := st.Intern(identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1))
	for i := range 5 {
		key := "k" + strconv.Itoa(i)
		st.Merge(0, key, 1, 1, id, 60)
		n, _ := admitAll(t, st, key, t0+int64(i)*ms, split)
		require.Equal(t, 10, n, key) // 1/4 of 40
		assert.LessOrEqual(t, st.Stats().HotKeys, 2)
		checkHot(t, st)
	}
	sh := &st.shards[0]
	var keys []string
	for pos, k := range sh.hot {
		require.Equal(t, pos, sh.hotSlab[k].pos)
		keys = append(keys, sh.keyOf(pos))
	}
	assert.ElementsMatch(t, []string{"k3", "k4"}, keys, "the two most recently used")

	none := settled(NewStore(StoreConfig{Self: rep("self", 1), MaxHotKeys: -1}))
	id, _ = none.Intern(identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1))
	none.Merge(0, "k", 1, 1, id, 60)
	n, _ := admitAll(t, none, "k", t0, split)
	assert.Equal(t, 10, n)
	none.FlushAt(abs(t0), split.Horizon, func(FlushEntry) {})
	n, r := admitAll(t, none, "k", t0+time.Second.Nanoseconds(), split)
	assert.Zero(t, n, "no record of the flush: every own admit counts as unseen")
	assert.Equal(t, split.Horizon, r.RetryAfter)
	assert.Zero(t, none.Stats().HotKeys)
}

// checkHot verifies the hot table's links: every slot marked hot has an
// entry pointing back at it, and every entry in use belongs to such a slot.
func checkHot(t *testing.T, st *Store) {
	t.Helper()
	for si := range st.shards {
		sh := &st.shards[si]
		sh.mu.Lock()
		marked := 0
		for i := range sh.slots {
			sl := &sh.slots[i]
			if sl.flags&flagHot == 0 {
				continue
			}
			require.NotZero(t, sl.flags&flagLive, "a free slot marked hot")
			k, ok := sh.hot[int32(i)]
			require.True(t, ok, "slot %d marked hot without an entry", i)
			require.Equal(t, int32(i), sh.hotSlab[k].pos)
			marked++
		}
		free := 0
		for _, e := range sh.hotSlab {
			if e.pos < 0 {
				free++
			}
		}
		require.Equal(t, marked, len(sh.hot))
		require.Equal(t, free, len(sh.hotFree))
		require.Equal(t, len(sh.hot)+len(sh.hotFree), len(sh.hotSlab))
		sh.mu.Unlock()
	}
}

// Hot entries follow their slots through growth, backward-shift deletion
// and eviction, and decisions keep reading the right key's records.
func TestHotEntriesSurviveChurn(t *testing.T) {
	rng := seeded(t, 9)
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, MaxKeys: 1 << 20, MaxHotKeys: 64, Seed: 2})
	other, _ := st.Intern(identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1))
	a := &Allowance{Horizon: 20 * ms, PoPs: 4}
	sh := &st.shards[0]
	t0 := time.Second.Nanoseconds()
	for step := 0; step < 20000; step++ {
		now := t0 + int64(step)*ms/10
		k := "k" + strconv.Itoa(rng.IntN(500))
		switch r := rng.IntN(20); {
		case r == 0:
			sh.mu.Lock()
			if p, ok := sh.find(st.hash(0, k), 0, k); ok {
				sh.remove(st, p)
			}
			sh.mu.Unlock()
		case r < 4:
			st.Merge(0, k, 1, 1, other, uint64(rng.IntN(80)))
		case r == 4:
			st.FlushAt(abs(now), a.Horizon, func(FlushEntry) {})
		default:
			st.AdmitSplit(0, k, nowAt(now), 100, 1, true, a)
		}
		if step%500 == 0 {
			checkHot(t, st)
		}
	}
	checkHot(t, st)
	assert.Positive(t, st.Stats().HotKeys)
	assert.LessOrEqual(t, st.Stats().HotKeys, 64)
}

// The ring of flushes keeps what later queries need: the oldest record is
// dropped only once the next is older than the horizon, and a flush that
// sent nothing new records nothing.
func TestHotRing(t *testing.T) {
	var e hotEntry
	h := int64(100)
	for i, at := range []int64{0, 10, 20, 30} {
		e.push(at, h, 1, [2]uint64{0, uint64(i + 1)})
	}
	e.push(35, h, 1, [2]uint64{0, 4}) // unchanged: nothing recorded
	require.EqualValues(t, 4, e.n)
	e.push(40, h, 1, [2]uint64{0, 5}) // 10 is not older than 40-100: overwrite the newest
	assert.Equal(t, []int64{0, 10, 20, 40}, []int64{e.snaps[0].at, e.snaps[1].at, e.snaps[2].at, e.snaps[3].at})
	e.push(110, h, 1, [2]uint64{0, 6}) // 10 <= 110-100: drop 0
	assert.Equal(t, []int64{10, 20, 40, 110}, []int64{e.snaps[0].at, e.snaps[1].at, e.snaps[2].at, e.snaps[3].at})
	s0, s1 := e.seen(125, h, 1)
	assert.Equal(t, [2]uint64{0, 3}, [2]uint64{s0, s1}, "the flush at 20 is the latest held at 125")
	s0, s1 = e.seen(125, h, 2)
	assert.Equal(t, [2]uint64{3, 0}, [2]uint64{s0, s1}, "a window later it is the previous window's")
	s0, s1 = e.seen(125, h, 3)
	assert.Equal(t, [2]uint64{0, 0}, [2]uint64{s0, s1})
	s0, s1 = e.seen(5, h, 1)
	assert.Equal(t, [2]uint64{0, 0}, [2]uint64{s0, s1}, "nothing held yet")
	assert.Equal(t, int64(15), e.matures(125, h), "the flush at 40 is held at 140")
	assert.Equal(t, h, e.matures(300, h), "none pending")
}

// A key whose own counts a flush sent longer than a horizon ago, with no
// admit since, is held by every replica, with no record of the key's
// flushes. The key (2 of a limit of 3, 60 replicas) is crowded: a replica
// with nothing unseen holds its one request in flight at its turn, drawn
// apart by each replica; with its first request unseen it holds none, as
// its share of the headroom (1) is below two requests and the key is past
// three quarters of its limit (no spare room). So within the horizon no
// replica admits a second request; long after it, they do at their turns.
func TestSentLongAgoCountsAsSeen(t *testing.T) {
	many := &Allowance{Horizon: 100 * ms, PoPs: 60}
	far, t0 := identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1), time.Second.Nanoseconds()
	for _, tc := range []struct {
		name     string
		after    int64 // the second request, after the flush that sent the first
		min, max int   // of 100 replicas, how many admit it
	}{
		{"within the horizon", 50 * ms, 0, 0},
		{"after the horizon", 2 * time.Second.Nanoseconds(), 1, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admitted := 0
			for seed := range 100 {
				st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: uint64(2*seed + 1)}))
				id, ok := st.Intern(far)
				require.True(t, ok)
				require.Equal(t, Merged, st.Merge(0, "ip", 1, 1, id, 1))
				require.True(t, st.AdmitSplit(0, "ip", nowAt(t0), 3, 1, true, many).Allowed)
				st.FlushAt(abs(t0+ms), many.Horizon, func(FlushEntry) {})
				for at := t0 + 51*ms; at <= t0+tc.after; at += 50 * ms {
					st.FlushAt(abs(at), many.Horizon, func(FlushEntry) {}) // later flushes: nothing to send
				}
				if st.AdmitSplit(0, "ip", nowAt(t0+ms+tc.after), 3, 1, true, many).Allowed {
					admitted++
				}
			}
			assert.GreaterOrEqual(t, admitted, tc.min)
			assert.LessOrEqual(t, admitted, tc.max)
		})
	}
}

// Soundness under churn: a slot whose own counts a flush sent within the
// horizon, or that has unsent admits, is never taken as held by every
// replica, whatever moves, growth, removals, sweeps and window rolls
// happened; and once no flush has sent anything for a horizon, every slot
// is taken as held.
func TestRecentSurvivesChurn(t *testing.T) {
	rng := seeded(t, 11)
	const horizon, width = 30 * ms, 400 * ms
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 2, MaxKeys: 1 << 20, Seed: 6})
	a := &Allowance{Horizon: horizon, PoPs: 4}
	lastSent := map[string]int64{} // key -> the last flush that sent an admit of it
	unsent := map[string]bool{}
	now := time.Second.Nanoseconds()
	at := func(t int64) Now { return Now{Index: t / width, Elapsed: t % width, Width: width} }
	for step := 0; step < 40000; step++ {
		now += ms / 4
		k := "k" + strconv.Itoa(rng.IntN(800))
		switch r := rng.IntN(60); {
		case r == 0:
			sh := st.shardOf(st.hash(0, k))
			sh.mu.Lock()
			if p, ok := sh.find(st.hash(0, k), 0, k); ok {
				sh.remove(st, p)
			}
			sh.mu.Unlock()
			delete(lastSent, k)
			delete(unsent, k)
		case r == 1:
			st.Sweep(func(RuleID) int64 { return now / width })
		case r < 6:
			st.FlushAt(now, horizon, func(FlushEntry) {})
			for k := range unsent {
				lastSent[k] = now
			}
			clear(unsent)
		default:
			if st.AdmitSplit(0, k, at(now), 1<<40, 1, true, a).Allowed {
				unsent[k] = true
			}
		}
		if step%97 != 0 {
			continue
		}
		for si := range st.shards {
			sh := &st.shards[si]
			sh.mu.Lock()
			for i := range sh.slots {
				sl := &sh.slots[i]
				if sl.flags&flagLive == 0 || sl.own == [2]uint64{} {
					continue
				}
				key := sh.keyOf(int32(i))
				held := sl.dirty&dirtyOwn == 0 && sl.flags&flagRecent == 0
				if unsent[key] || lastSent[key] > now-horizon {
					require.False(t, held, "step %d: %s sent at %d, now %d, taken as held", step, key, lastSent[key], now)
				}
			}
			sh.mu.Unlock()
		}
	}
	st.FlushAt(now, horizon, func(FlushEntry) {})
	now += horizon
	st.FlushAt(now, horizon, func(FlushEntry) {})
	recent := 0
	for si := range st.shards {
		for _, sl := range st.shards[si].slots {
			if sl.flags&flagLive != 0 && sl.flags&flagRecent != 0 {
				recent++
			}
		}
	}
	assert.Zero(t, recent)
}

// The sequence number of a slot's last send lives in spare bits of dirty
// and flags: window rolls and flushes keep it, and it keeps theirs.
func TestSentSeqBits(t *testing.T) {
	for _, seq := range []uint8{0, 5, 8, 45, 63} {
		sl := slot{flags: flagLive | flagHot, dirty: dirtyOwn1 | dirtyPoP2}
		sl.setSentSeq(seq)
		require.Equal(t, seq, sl.sentSeq())
		assert.Equal(t, flagLive|flagHot, sl.flags&^(7<<sentSeqShift))
		assert.Equal(t, dirtyOwn1|dirtyPoP2, sl.dirty&dirtyAll)
		for d := int64(1); d <= 3; d++ {
			shifted := shiftDirty(sl.dirty, d)
			assert.Equal(t, shiftDirty(sl.dirty&dirtyAll, d), shifted&dirtyAll, "d=%d", d)
			assert.Equal(t, sl.dirty&^dirtyAll, shifted&^dirtyAll, "d=%d", d)
		}
	}
}

// Its floor follows the previous window, in two levels: this PoP's part of
// it, then this node's part of the PoP's, each at least an equal split. A
// node new to a key its PoP's members counted last window gets a member's
// share of the PoP's part, not 1/Replicas of the whole: a client pinned to
// one PoP keeps being served by its every node. Counts of the current
// window do not count towards it (at a cold start every PoP's members see
// each other's first).
func TestSplitFloorFollowsPreviousWindow(t *testing.T) {
	a := &Allowance{Horizon: 100 * ms, Members: 3, PoPs: 10}
	run := func(at, win int64, others ...identity.Replica) int {
		st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: 8}))
		for _, r := range others {
			id, _ := st.Intern(r)
			require.Equal(t, Merged, st.Merge(0, "k", 1, win, id, 45))
		}
		n, _ := admitAll(t, st, "k", at, a)
		return n
	}
	members := []identity.Replica{rep("ams-2", 1), rep("ams-3", 1)}
	pops := []identity.Replica{identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1), identity.PoPReplica(identity.PoPID{Region: "far", PoP: "b"}, 1)}
	sec := time.Second.Nanoseconds()
	// Members ams-2 and ams-3 held the previous window (81 of it left in
	// the estimate at 1s, past three quarters of the limit: no spare
	// room): the PoP's part is all of it, this node a third of the PoP's:
	// a third of H = 19, 6 unseen.
	assert.Equal(t, 6, run(sec, 0, members...))
	// The same counts held by two other PoPs: this PoP's part is nothing,
	// so an equal split among PoPs and members, 1/30 of H = 19: one (two
	// in flight, as the node refused nothing yet: secondInFlight).
	assert.Equal(t, 2, run(sec, 0, pops...))
	// Too early in the window for every replica to hold the previous one.
	assert.Equal(t, 2, run(150*ms, 0, members...))
	// The members' counts of the current window (a cold start) do not
	// count: 1/30 of H = 10.
	assert.Equal(t, 2, run(sec, 1, members...))
}

// The room pooled beyond a replica's share: none when the headroom is
// within what the fleet holds unseen on average or the replica holds more
// than the spread of its part of it; otherwise its part of what the
// average leaves, at most pooledPart x w x limit.
func TestPooledRoom(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		w, room, fleet, u, limit float64
		want                     float64
	}{
		{"headroom within the average", 0.25, 90, 90, 1, 1000, 0},
		{"headroom below the average", 0.25, 50, 90, 1, 1000, 0},
		{"within the spread", 0.25, 100, 90, 30, 1000, 0.75 * 10},
		{"at the spread's edge", 0.25, 100, 90, 22.5 + 2*4.743416490252569 + 1, 1000, 0.75 * 10},
		{"past the spread", 0.25, 100, 90, 34, 1000, 0},
		{"bounded by the limit's part", 0.25, 200, 90, 30, 1000, pooledPart * 0.25 * 1000},
		{"a replica alone", 1, 200, 90, 30, 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, pooledRoom(tc.w, tc.room, tc.fleet, tc.u, tc.limit), 1e-9)
		})
	}
}

// A calm replica near the limit pools the headroom the fleet's average
// unseen admits leave, within the spread of its own; once it refuses the
// key it is held to its share for two horizons.
func TestSplitPoolsCalmReplicas(t *testing.T) {
	const limit = 10_000
	admit := func(st *Store, at int64, lim uint64) int {
		t.Helper()
		for n := 0; n < 1000; n++ {
			if !st.AdmitSplit(0, "k", nowAt(at), lim, 1, true, split).Allowed {
				return n
			}
		}
		t.Fatal("never denied")
		return 0
	}
	st := withOthers(t, "k", 3290, "a", "b", "c") // 9 870 of 10 000
	t0 := time.Second.Nanoseconds()
	// K = 9 870 over a window: the fleet holds 98.7 unseen on average (a
	// horizon of 100 ms, no flush yet). H = 130, the share 1/4: 32.5. The
	// average leaves 31.3, of which 3/4 pooled, within the spread of
	// 24.7 (+ 2 x 4.97 + 1 = 35.6): 35.
	assert.Equal(t, 35, admit(st, t0, limit))

	// Denied at t0. At t1 + horizon the 35 are seen: K = 9 905, and at a
	// limit of 10 040, H = 135, the share 33.75 and the spread 35.7. Within
	// two horizons of the denial the replica is held to its share.
	t1 := t0 + ms
	st.FlushAt(abs(t1), split.Horizon, func(FlushEntry) {})
	assert.Equal(t, 33, admit(st, t1+split.Horizon, limit+40))
	// Calm again (no denial for two horizons since t2, nothing new held):
	// it pools up to the spread.
	t2 := t1 + split.Horizon
	assert.Equal(t, 2, admit(st, t2+2*split.Horizon+ms, limit+40))
}
