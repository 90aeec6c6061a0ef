package crdt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const W = int64(10 * time.Second)

func rep(node string, inc uint64) identity.Replica {
	return identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: node, Incarnation: inc}
}

func at(index int64) Now { return Now{Index: index, Elapsed: W / 2, Width: W} }

// seeded returns a deterministic RNG and logs its seed so a failure can be replayed.
func seeded(t *testing.T, seed uint64) *rand.Rand {
	t.Helper()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// wkey names one G-counter of the reference model.
type wkey struct {
	rule RuleID
	key  string
	win  int64
}

// model is the reference: every replica's own count per G-counter.
type model map[wkey]map[identity.Replica]uint64

func (m model) total(k wkey) uint64 {
	var s uint64
	for _, c := range m[k] {
		s += c
	}
	return s
}

type msg struct {
	from identity.Replica
	e    FlushEntry
}

func deliver(st *Store, now int64, m msg) MergeOutcome {
	id, ok := st.Intern(m.from)
	if !ok {
		panic("replica table full")
	}
	return st.Merge(m.e.Rule, m.e.Key, now, m.e.Window, id, m.e.Count)
}

// TestConvergenceUnderLossDupReorder runs random schedules of admits and
// deltas between 3-10 replicas over a lossy, duplicating, reordering network,
// then one round of anti-entropy, and checks every replica against the
// reference totals.
func TestConvergenceUnderLossDupReorder(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := seeded(t, seed)
			n := 3 + rng.IntN(8)
			reps := make([]identity.Replica, n)
			stores := make([]*Store, n)
			for i := range reps {
				reps[i] = rep("n"+strconv.Itoa(i), uint64(i+1))
				stores[i] = NewStore(StoreConfig{Self: reps[i], Shards: 1 + rng.IntN(8)})
			}
			ref := model{}
			keys := []string{"a", "b", "203.0.113.77", "a-key-longer-than-inline-storage"}
			var inflight []msg
			now := int64(100)
			for step := 0; step < 400; step++ {
				switch r := rng.IntN(100); {
				case r < 2:
					now++ // the window moves on
				case r < 60:
					i, k, c := rng.IntN(n), keys[rng.IntN(len(keys))], uint64(1+rng.IntN(3))
					res := stores[i].Admit(1, k, at(now), 1<<40, c, true)
					require.True(t, res.Allowed)
					wk := wkey{1, k, now}
					if ref[wk] == nil {
						ref[wk] = map[identity.Replica]uint64{}
					}
					ref[wk][reps[i]] += c
				case r < 75:
					i := rng.IntN(n)
					stores[i].Flush(func(e FlushEntry) {
						if e.Changed&OwnChanged == 0 {
							return // a member's count raised the PoP total
						}
						for j := range reps {
							if j != i {
								inflight = append(inflight, msg{from: reps[i], e: e})
							}
						}
					})
				default:
					if len(inflight) == 0 {
						continue
					}
					j := rng.IntN(len(inflight)) // reorder
					m := inflight[j]
					if rng.IntN(10) > 0 { // 10% loss
						inflight = append(inflight[:j], inflight[j+1:]...)
					} // else: kept, so delivered again later (duplicate)
					if rng.IntN(5) == 0 {
						continue // lost
					}
					to := rng.IntN(n)
					deliver(stores[to], now, m)
				}
			}
			// Anti-entropy: everyone sends every own live count to everyone.
			for i, st := range stores {
				st.Own(func(RuleID) int64 { return now }, func(e FlushEntry) {
					for j := range stores {
						if j != i {
							deliver(stores[j], now, msg{from: reps[i], e: e})
						}
					}
				})
			}
			for i, st := range stores {
				for _, k := range keys {
					prev, curr := totals(st, 1, k, now)
					assert.Equal(t, ref.total(wkey{1, k, now - 1}), prev, "replica %d key %q prev", i, k)
					assert.Equal(t, ref.total(wkey{1, k, now}), curr, "replica %d key %q curr", i, k)
				}
				// Every replica is a node of one PoP: each one's PoP totals
				// are the whole totals.
				pop := map[wkey]uint64{}
				st.Totals(func(RuleID) int64 { return now }, func(e FlushEntry) { pop[wkey{e.Rule, e.Key, e.Window}] = e.PoP })
				for wk := range ref {
					if wk.win >= now-1 && ref.total(wk) > 0 {
						assert.Equal(t, ref.total(wk), pop[wk], "replica %d PoP total of %+v", i, wk)
						delete(pop, wk)
					}
				}
				assert.Empty(t, pop, "replica %d: PoP totals beyond the model", i)
			}
		})
	}
}

func totals(st *Store, rule RuleID, key string, now int64) (prev, curr uint64) {
	views, _ := st.View(rule, key, now)
	for _, v := range views {
		switch v.Index {
		case now - 1:
			prev = v.Total
		case now:
			curr = v.Total
		}
	}
	return prev, curr
}

// TestHotPathSumsMatchReplicas checks that the hot-path sums a decision uses
// (own + others) equal the per-replica view after random merges, rolls and
// clock steps back of several windows.
func TestHotPathSumsMatchReplicas(t *testing.T) {
	rng := seeded(t, 7)
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 2})
	remotes := []identity.Replica{rep("a", 1), rep("b", 1), rep("b", 2)}
	now := int64(50)
	for step := 0; step < 2000; step++ {
		switch r := rng.IntN(10); {
		case r == 0 && rng.IntN(8) == 0:
			now -= 2 + int64(rng.IntN(4)) // the clock steps back; the key follows at its next use
			st.Admit(3, "k", at(now), 1<<40, 1, true)
		case r == 0:
			now += int64(rng.IntN(2))
		case r < 4:
			st.Admit(3, "k", at(now), 1<<40, 1, true)
		default:
			id, _ := st.Intern(remotes[rng.IntN(len(remotes))])
			st.Merge(3, "k", now, now-1+int64(rng.IntN(3)), id, uint64(rng.IntN(100)))
		}
		prev, curr := totals(st, 3, "k", now)
		// A limit equal to the view's estimate + 1 must admit cost 1, and one
		// less must not: the hot path sees the same totals as the view.
		est := float64(prev)*0.5 + float64(curr)
		lim := uint64(est) + 1
		if float64(lim) >= est+1 {
			r := st.Admit(3, "k", at(now), lim, 1, false)
			require.True(t, r.Allowed, "step %d: est %.1f lim %d", step, est, lim)
			require.InDelta(t, est, r.Estimate, 1e-6, "step %d", step)
		}
	}
}

// TestMergeLaws checks that merging is commutative, associative and
// idempotent, and that values are monotone, against the reference model.
func TestMergeLaws(t *testing.T) {
	rng := seeded(t, 42)
	for trial := 0; trial < 100; trial++ {
		now := int64(10)
		var entries []msg
		ref := model{}
		for i := 0; i < 1+rng.IntN(30); i++ {
			m := msg{
				from: rep("r"+strconv.Itoa(rng.IntN(4)), uint64(1+rng.IntN(2))),
				e:    FlushEntry{Rule: RuleID(rng.IntN(2)), Key: []string{"x", "y"}[rng.IntN(2)], Window: now - 1 + int64(rng.IntN(2)), Count: uint64(rng.IntN(50))},
			}
			entries = append(entries, m)
			wk := wkey{m.e.Rule, m.e.Key, m.e.Window}
			if ref[wk] == nil {
				ref[wk] = map[identity.Replica]uint64{}
			}
			ref[wk][m.from] = max(ref[wk][m.from], m.e.Count)
		}
		apply := func(order []msg) *Store {
			st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 4})
			var last = map[wkey]uint64{}
			for _, m := range order {
				deliver(st, now, m)
				// Monotone: no total ever goes down.
				wk := wkey{m.e.Rule, m.e.Key, m.e.Window}
				p, c := totals(st, m.e.Rule, m.e.Key, now)
				got := map[int64]uint64{now - 1: p, now: c}[m.e.Window]
				require.GreaterOrEqual(t, got, last[wk])
				last[wk] = got
			}
			return st
		}
		shuffled := append([]msg(nil), entries...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		doubled := append(append([]msg(nil), entries...), shuffled...)
		// Associativity: merging a merged prefix state into a store that holds
		// the suffix equals merging everything in one go.
		split := rng.IntN(len(entries) + 1)
		left := apply(entries[:split])
		right := apply(entries[split:])
		left.Entries(func(RuleID) int64 { return now }, func(id ReplicaID, e FlushEntry) {
			deliver(right, now, msg{from: left.Replica(id), e: e})
		})
		for _, st := range []*Store{apply(entries), apply(shuffled), apply(doubled), right} {
			for _, r := range []RuleID{0, 1} {
				for _, k := range []string{"x", "y"} {
					p, c := totals(st, r, k, now)
					assert.Equal(t, ref.total(wkey{r, k, now - 1}), p)
					assert.Equal(t, ref.total(wkey{r, k, now}), c)
				}
			}
		}
	}
}

// TestNewIncarnationNotHidden: a restarted replica's fresh counts add to its
// old incarnation's instead of hiding behind the old maximum.
func TestNewIncarnationNotHidden(t *testing.T) {
	peer := NewStore(StoreConfig{Self: rep("peer", 1)})
	old, _ := peer.Intern(rep("a", 1))
	require.Equal(t, Merged, peer.Merge(0, "k", 5, 5, old, 10))
	restarted, _ := peer.Intern(rep("a", 2))
	require.NotEqual(t, old, restarted)
	require.Equal(t, Merged, peer.Merge(0, "k", 5, 5, restarted, 3))
	_, curr := totals(peer, 0, "k", 5)
	assert.Equal(t, uint64(13), curr)
	views, ok := peer.View(0, "k", 5)
	require.True(t, ok)
	require.Len(t, views, 1)
	assert.Equal(t, map[string]uint64{"eu/ams/a#1": 10, "eu/ams/a#2": 3}, views[0].Replicas)
}

func TestWindowsRollAndExpire(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	a, _ := st.Intern(rep("a", 1))
	st.Admit(0, "k", at(10), 100, 4, true)
	assert.Equal(t, Merged, st.Merge(0, "k", 10, 11, a, 7), "one window ahead is kept")
	assert.Equal(t, Ahead, st.Merge(0, "k", 10, 12, a, 7))
	assert.Equal(t, Stale, st.Merge(0, "k", 10, 8, a, 7))
	p, c := totals(st, 0, "k", 10)
	assert.Equal(t, [2]uint64{0, 4}, [2]uint64{p, c})
	// Move to window 11: own 4 becomes prev, the early entry becomes current.
	r := st.Admit(0, "k", Now{Index: 11, Elapsed: 0, Width: W}, 100, 1, true)
	assert.InDelta(t, 4+7, r.Estimate, 1e-9)
	p, c = totals(st, 0, "k", 11)
	assert.Equal(t, [2]uint64{4, 8}, [2]uint64{p, c})
	// Two windows later everything has passed.
	r = st.Admit(0, "k", Now{Index: 13, Elapsed: 0, Width: W}, 100, 1, false)
	assert.Zero(t, r.Estimate)
	assert.Zero(t, st.Sweep(func(RuleID) int64 { return 14 }), "window 13 is still the previous window at 14")
	assert.Equal(t, 1, st.Sweep(func(RuleID) int64 { return 15 }))
	assert.Zero(t, st.Stats().Keys)
}

// A decision that read the clock a moment before another rolled the key
// into the next window is decided and counted in the key's window.
func TestClockBackwardsCountsForward(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	st.Admit(0, "k", Now{Index: 10, Elapsed: 1, Width: W}, 100, 5, true)
	r := st.Admit(0, "k", Now{Index: 9, Elapsed: W - W/100, Width: W}, 100, 1, true)
	assert.True(t, r.Allowed)
	_, c := totals(st, 0, "k", 10)
	assert.Equal(t, uint64(6), c, "counted in the key's current window, never moved back")
}

// A clock stepped back by one whole window (a fleet clock correction of a
// 1 s window) moves the key back with it as a step of several windows
// does: counted on in the window ahead, its counts would stay where the
// other replicas, a window behind, take them as ahead until they reach it.
func TestClockBackOneWindowRebases(t *testing.T) {
	for _, back := range []int64{W/4 + W/8 + 1, W / 2, W} {
		st := NewStore(StoreConfig{Self: rep("self", 1)})
		st.Admit(0, "k", Now{Index: 10, Elapsed: W / 4, Width: W}, 100, 5, true)
		st.Flush(func(FlushEntry) {})
		at := 10*W + W/4 - back
		now := Now{Index: at / W, Elapsed: at % W, Width: W}
		r := st.Admit(0, "k", now, 100, 1, true)
		assert.True(t, r.Allowed)
		_, c := totals(st, 0, "k", 9)
		assert.Equal(t, uint64(6), c, "back %v: the counts made ahead move to the window of now", back)
		var sent []FlushEntry
		st.Flush(func(e FlushEntry) { sent = append(sent, e) })
		require.Len(t, sent, 1)
		assert.Equal(t, int64(9), sent[0].Window, "back %v", back)
	}
}

// A clock that goes back more than a window (a node stepping back to the
// clock its fleet agreed) moves the key back with it: the own counts made
// ahead count in the current window, the other replicas' counts of it are
// merged instead of refused as stale, and the next flush sends the own
// count of the current window.
func TestClockBackMoreThanAWindowRebases(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	st.Admit(0, "k", at(14), 100, 5, true) // 4 windows ahead of the fleet
	st.Flush(func(FlushEntry) {})
	other, ok := st.Intern(rep("other", 1))
	require.True(t, ok)
	assert.Equal(t, Merged, st.Merge(0, "k", 10, 10, other, 7), "the fleet's window is live again")
	r := st.Admit(0, "k", at(10), 100, 1, true)
	assert.True(t, r.Allowed)
	assert.InDelta(t, 5+7, r.Estimate, 1e-9, "the counts made ahead and the other replica's")
	_, c := totals(st, 0, "k", 10)
	assert.Equal(t, uint64(5+1+7), c)
	var sent []FlushEntry
	st.Flush(func(e FlushEntry) { sent = append(sent, e) })
	require.Len(t, sent, 1)
	assert.Equal(t, int64(10), sent[0].Window)
	assert.Equal(t, uint64(6), sent[0].Count)
	assert.NotZero(t, sent[0].Changed&OwnChanged)

	// A count decided elsewhere (a shared paced key) moves back the same way.
	h := st.Hash(0, "c")
	require.True(t, st.CountHashed(h, 0, "c", at(14), 2))
	require.True(t, st.CountHashed(h, 0, "c", at(10), 1))
	_, c = totals(st, 0, "c", 10)
	assert.Equal(t, uint64(3), c)
}

// TestFloodDoesNotEvictHotKey fills a small store with random keys while a
// hot key is being limited: memory stays capped, the hot key keeps its count
// and the churn is visible in the stats.
func TestFloodDoesNotEvictHotKey(t *testing.T) {
	rng := seeded(t, 99)
	const limit = 100
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 256, Shards: 4})
	st.SetProtect(0, limit/10+1)
	for i := 0; i < limit; i++ {
		require.True(t, st.Admit(0, "hot", at(1), limit, 1, true).Allowed)
	}
	for i := 0; i < 20000; i++ {
		ip := fmt.Sprintf("%d.%d.%d.%d", rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256))
		st.Admit(0, ip, at(1), limit, 1, true)
		if i%1000 == 0 {
			require.False(t, st.Admit(0, "hot", at(1), limit, 1, true).Allowed, "hot key must stay limited")
		}
	}
	stats := st.Stats()
	assert.LessOrEqual(t, stats.Keys, 256)
	// The flood is 80 times the store in one window: keys evicted leave
	// their counts in the sketch, which denies the flood's later keys
	// before they take a place.
	assert.Greater(t, stats.Evicted, uint64(2000))
	_, c := totals(st, 0, "hot", 1)
	assert.Equal(t, uint64(limit), c)
}

// TestFullOfProtectedKeysFailsOpenUntracked: when every key is protected, a
// new key is decided without history and counted nowhere.
func TestFullOfProtectedKeysFailsOpenUntracked(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 4, Shards: 1})
	st.SetProtect(0, 2)
	for i := 0; i < 4; i++ {
		for j := 0; j < 5; j++ {
			st.Admit(0, "k"+strconv.Itoa(i), at(1), 10, 1, true)
		}
	}
	r := st.Admit(0, "new", at(1), 10, 1, true)
	assert.True(t, r.Allowed)
	assert.True(t, r.Untracked)
	_, ok := st.View(0, "new", 1)
	assert.False(t, ok)
	assert.Equal(t, uint64(1), st.Stats().Overflow)
	a, _ := st.Intern(rep("a", 1))
	assert.Equal(t, Full, st.Merge(0, "other", 1, 1, a, 3))
	// Once the windows pass, expired keys make room again.
	r = st.Admit(0, "new", at(5), 10, 1, true)
	assert.False(t, r.Untracked)
}

func TestFlushReportsChangedOwnCountsAndPoPTotals(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	member, _ := st.Intern(rep("a", 1))
	foreign, _ := st.Intern(identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1})
	st.Admit(0, "k1", at(1), 100, 2, true)
	st.Admit(0, "k1", at(1), 100, 3, true)
	st.Admit(1, "a-very-long-key-that-is-not-inline", at(1), 100, 1, true)
	st.Merge(0, "k2", 1, 1, member, 9)
	st.Merge(0, "k3", 1, 1, foreign, 4)
	st.Merge(0, "k1", 1, 1, foreign, 7)
	st.Merge(0, "k1", 1, 1, member, 1)
	var got []FlushEntry
	st.Flush(func(e FlushEntry) { got = append(got, e) })
	sort.Slice(got, func(i, j int) bool { return got[i].Key < got[j].Key })
	assert.Equal(t, []FlushEntry{
		{Rule: 1, Key: "a-very-long-key-that-is-not-inline", Window: 1, Count: 1, PoP: 1, Changed: OwnChanged | PoPChanged},
		{Rule: 0, Key: "k1", Window: 1, Count: 5, PoP: 6, Changed: OwnChanged | PoPChanged},
		{Rule: 0, Key: "k2", Window: 1, PoP: 9, Changed: PoPChanged},
	}, got, "k3 holds only a foreign count, outside the PoP total")
	got = nil
	st.Flush(func(e FlushEntry) { got = append(got, e) })
	assert.Empty(t, got, "nothing changed since")

	st.Merge(0, "k1", 1, 1, foreign, 8)
	st.Merge(0, "k1", 1, 1, member, 1)
	st.Flush(func(e FlushEntry) { got = append(got, e) })
	assert.Empty(t, got, "a foreign count and an unchanged member count change no PoP total")
	st.Merge(0, "k1", 1, 1, member, 4)
	st.Flush(func(e FlushEntry) { got = append(got, e) })
	assert.Equal(t, []FlushEntry{{Rule: 0, Key: "k1", Window: 1, Count: 5, PoP: 9, Changed: PoPChanged}}, got)
}

// TestPoPTotalsCountMembersOnly: the PoP total is the own count plus the
// counts of other nodes of the own PoP (former incarnations of this node
// included), never aggregates or other PoPs.
func TestPoPTotalsCountMembersOnly(t *testing.T) {
	self := rep("self", 2)
	tests := []struct {
		name   string
		from   identity.Replica
		member bool
	}{
		{"other node", rep("b", 1), true},
		{"other node, other incarnation", rep("b", 2), true},
		{"former incarnation of self", rep("self", 1), true},
		{"own PoP aggregate", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), false},
		{"other PoP in the region", identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "fra"}, Node: "b", Incarnation: 1}, false},
		{"same PoP name, other region", identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "ams"}, Node: "b", Incarnation: 1}, false},
		{"other PoP aggregate", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewStore(StoreConfig{Self: self})
			st.Admit(0, "k", at(5), 100, 2, true)
			id, ok := st.Intern(tt.from)
			require.True(t, ok)
			assert.Equal(t, tt.member, st.isMember(id))
			require.Equal(t, Merged, st.Merge(0, "k", 5, 5, id, 10))
			want := uint64(2)
			if tt.member {
				want = 12
			}
			var flushed, totals []FlushEntry
			st.Flush(func(e FlushEntry) { flushed = append(flushed, e) })
			st.Totals(func(RuleID) int64 { return 5 }, func(e FlushEntry) { totals = append(totals, e) })
			assert.Equal(t, []FlushEntry{{Rule: 0, Key: "k", Window: 5, Count: 2, PoP: want, Changed: OwnChanged | PoPChanged}}, flushed)
			assert.Equal(t, []FlushEntry{{Rule: 0, Key: "k", Window: 5, Count: 2, PoP: want, Changed: PoPChanged}}, totals)
			var own []FlushEntry
			st.Own(func(RuleID) int64 { return 5 }, func(e FlushEntry) { own = append(own, e) })
			assert.Equal(t, []FlushEntry{{Rule: 0, Key: "k", Window: 5, Count: 2, PoP: want, Changed: OwnChanged}}, own)
		})
	}
}

// TestPoPMarksFollowTheWindow: the PoP-total marks of the previous, current
// and next window move with the key's window and are dropped with it.
func TestPoPMarksFollowTheWindow(t *testing.T) {
	tests := []struct {
		advance int64
		want    []FlushEntry
	}{
		{0, []FlushEntry{
			{Key: "k", Window: 9, PoP: 3, Changed: PoPChanged},
			{Key: "k", Window: 10, Count: 2, PoP: 2, Changed: OwnChanged | PoPChanged},
			{Key: "k", Window: 11, PoP: 5, Changed: PoPChanged},
		}},
		{1, []FlushEntry{
			{Key: "k", Window: 10, Count: 2, PoP: 2, Changed: OwnChanged | PoPChanged},
			{Key: "k", Window: 11, PoP: 5, Changed: PoPChanged},
		}},
		{2, []FlushEntry{{Key: "k", Window: 11, PoP: 5, Changed: PoPChanged}}},
		{3, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.advance), func(t *testing.T) {
			st := NewStore(StoreConfig{Self: rep("self", 1)})
			member, _ := st.Intern(rep("b", 1))
			st.Admit(0, "k", at(10), 100, 2, true)
			require.Equal(t, Merged, st.Merge(0, "k", 10, 11, member, 5), "a member's clock runs ahead")
			require.Equal(t, Merged, st.Merge(0, "k", 10, 9, member, 3))
			st.Admit(0, "k", at(10+tt.advance), 100, 1, false) // rolls, counts nothing
			var got []FlushEntry
			st.Flush(func(e FlushEntry) { got = append(got, e) })
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestShiftDirty(t *testing.T) {
	all := dirtyOwn0 | dirtyOwn1 | dirtyPoP0 | dirtyPoP1 | dirtyPoP2
	tests := []struct {
		in   uint8
		d    int64
		want uint8
	}{
		{all, 1, dirtyOwn0 | dirtyPoP0 | dirtyPoP1},
		{all, 2, dirtyPoP0},
		{all, 3, 0},
		{all, 1 << 40, 0},
		{dirtyOwn0 | dirtyPoP0, 1, 0},
		{dirtyOwn1, 1, dirtyOwn0},
		{dirtyPoP2, 1, dirtyPoP1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, shiftDirty(tt.in, tt.d), "%05b by %d", tt.in, tt.d)
	}
}

// TestTotalsLiveWindowsOnly: Totals reports every PoP total above 0 of the
// live windows, long keys included, and nothing of passed windows.
func TestTotalsLiveWindowsOnly(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 4})
	member, _ := st.Intern(rep("b", 1))
	foreign, _ := st.Intern(identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 3))
	long := "a-key-longer-than-inline-storage"
	st.Admit(0, "k", at(10), 100, 2, true)
	st.Merge(0, "k", 10, 9, member, 4)
	st.Merge(0, long, 10, 10, member, 6)
	st.Merge(0, "foreign-only", 10, 10, foreign, 6)
	st.Admit(1, "old", at(3), 100, 1, true)
	var got []FlushEntry
	st.Totals(func(r RuleID) int64 { return 10 }, func(e FlushEntry) { got = append(got, e) })
	sort.Slice(got, func(i, j int) bool {
		if got[i].Key != got[j].Key {
			return got[i].Key < got[j].Key
		}
		return got[i].Window < got[j].Window
	})
	assert.Equal(t, []FlushEntry{
		{Key: long, Window: 10, PoP: 6, Changed: PoPChanged},
		{Key: "k", Window: 9, PoP: 4, Changed: PoPChanged},
		{Key: "k", Window: 10, Count: 2, PoP: 2, Changed: PoPChanged},
	}, got)
}

// TestMembershipFollowsReplicaIDs: an ID's member mark is set by Intern and
// cleared when the ID is forgotten, so a reused ID is classified afresh.
func TestMembershipFollowsReplicaIDs(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	var ids []ReplicaID
	for i := 0; i < 200; i++ { // past one word of the member set
		r := rep("m"+strconv.Itoa(i), 1)
		if i%2 == 1 {
			r.PoP = "fra"
		}
		id, ok := st.Intern(r)
		require.True(t, ok)
		assert.Equal(t, i%2 == 0, st.isMember(id), i)
		ids = append(ids, id)
	}
	assert.False(t, st.isMember(SelfID))
	assert.False(t, st.isMember(1000), "never interned")
	require.Equal(t, 200, st.ForgetReplicas())
	for _, id := range ids {
		assert.False(t, st.isMember(id))
	}
	a, _ := st.Intern(identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1))
	b, _ := st.Intern(rep("b", 1))
	assert.Contains(t, ids, a, "IDs are reused")
	assert.False(t, st.isMember(a))
	assert.True(t, st.isMember(b))
}

// TestSeedMakesStoresDeterministic: two stores with the same seed fed the
// same calls past MaxKeys evict the same keys and report the same state in
// the same order; another seed places and evicts differently; without a seed
// every store hashes differently.
func TestSeedMakesStoresDeterministic(t *testing.T) {
	run := func(seed uint64) (*Store, []FlushEntry) {
		st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 64, Shards: 4, Seed: seed})
		st.SetProtect(0, 3)
		member, _ := st.Intern(rep("b", 1))
		rng := seeded(t, 11)
		for i := 0; i < 5000; i++ {
			k := "10.0." + strconv.Itoa(rng.IntN(40)) + "." + strconv.Itoa(rng.IntN(40))
			if rng.IntN(4) == 0 {
				st.Merge(0, k, 1, 1, member, uint64(1+rng.IntN(3)))
			} else {
				st.Admit(0, k, at(1), 100, 1, true)
			}
		}
		var out []FlushEntry
		st.Entries(func(RuleID) int64 { return 1 }, func(id ReplicaID, e FlushEntry) { out = append(out, e) })
		return st, out
	}
	a, aEntries := run(7)
	b, bEntries := run(7)
	require.Greater(t, a.Stats().Evicted, uint64(100))
	assert.Equal(t, a.Stats(), b.Stats())
	assert.Equal(t, aEntries, bEntries)
	var aFlush, bFlush []FlushEntry
	a.Flush(func(e FlushEntry) { aFlush = append(aFlush, e) })
	b.Flush(func(e FlushEntry) { bFlush = append(bFlush, e) })
	assert.Equal(t, aFlush, bFlush)

	_, cEntries := run(8)
	assert.NotEqual(t, aEntries, cEntries, "another seed, another placement")

	x := NewStore(StoreConfig{Self: rep("self", 1)})
	y := NewStore(StoreConfig{Self: rep("self", 1)})
	assert.NotEqual(t, x.hash(0, "k"), y.hash(0, "k"), "random seeds")
	assert.Equal(t, a.hash(0, "k"), b.hash(0, "k"))
}

func TestDropRuleAndKeysByRule(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	for i := 0; i < 10; i++ {
		st.Admit(RuleID(i%2), "k"+strconv.Itoa(i), at(1), 100, 1, true)
	}
	assert.Equal(t, map[RuleID]int{0: 5, 1: 5}, st.KeysByRule())
	st.DropRule(0)
	assert.Equal(t, map[RuleID]int{1: 5}, st.KeysByRule())
	assert.Equal(t, 5, st.Stats().Keys)
}

func TestInternCap(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxReplicas: 3})
	_, ok := st.Intern(rep("a", 1))
	require.True(t, ok)
	_, ok = st.Intern(rep("b", 1))
	require.True(t, ok)
	_, ok = st.Intern(rep("c", 1))
	assert.False(t, ok)
	id, ok := st.Intern(rep("self", 1))
	assert.True(t, ok)
	assert.Equal(t, SelfID, id)
}

// TestTableSurvivesChurn inserts, merges into and removes many short and
// long keys (exercising growth, backward-shift deletion and the side structures that
// move with slots) and checks every key's counts and the change marks (own
// and PoP total, the remote being a member) against a model.
func TestTableSurvivesChurn(t *testing.T) {
	rng := seeded(t, 5)
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, MaxKeys: 1 << 20})
	remote, _ := st.Intern(rep("remote", 1))
	require.True(t, st.isMember(remote))
	type counts struct{ own, remote uint64 }
	model := map[string]*counts{}
	dirty := map[string]Changed{}
	sh := &st.shards[0]
	name := func(i int) string {
		if i%3 == 0 {
			return "a-long-key-stored-outside-the-slot-" + strconv.Itoa(i)
		}
		return "k" + strconv.Itoa(i)
	}
	for step := 0; step < 30000; step++ {
		k := name(rng.IntN(2000))
		switch r := rng.IntN(10); {
		case r < 2 && model[k] != nil:
			sh.mu.Lock()
			p, ok := sh.find(st.hash(0, k), 0, k)
			require.True(t, ok)
			sh.remove(st, p)
			sh.mu.Unlock()
			delete(model, k)
			delete(dirty, k)
		case r < 4:
			c := uint64(rng.IntN(100))
			if st.Merge(0, k, 1, 1, remote, c) == Merged {
				if model[k] == nil {
					model[k] = &counts{}
				}
				model[k].remote = c
				dirty[k] |= PoPChanged
			}
		case r == 9:
			got := map[string]FlushEntry{}
			st.Flush(func(e FlushEntry) {
				_, dup := got[e.Key]
				require.False(t, dup, "step %d: %q flushed twice", step, e.Key)
				got[e.Key] = e
			})
			want := map[string]FlushEntry{}
			for k, ch := range dirty {
				c := model[k]
				if c.own == 0 {
					ch &^= OwnChanged
				}
				want[k] = FlushEntry{Key: k, Window: 1, Count: c.own, PoP: c.own + c.remote, Changed: ch}
			}
			require.Equal(t, want, got, "step %d", step)
			dirty = map[string]Changed{}
		default:
			st.Admit(0, k, at(1), 1<<40, 1, true)
			if model[k] == nil {
				model[k] = &counts{}
			}
			model[k].own++
			dirty[k] |= OwnChanged | PoPChanged
		}
	}
	assert.Equal(t, len(model), st.Stats().Keys)
	for k, c := range model {
		views, ok := st.View(0, k, 1)
		require.True(t, ok, k)
		require.Len(t, views, 1, k)
		assert.Equal(t, c.own+c.remote, views[0].Total, k)
	}
}

// TestReplicasPerKeyCapped: a sender inventing incarnations cannot grow one
// key's per-replica entries without bound.
func TestReplicasPerKeyCapped(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxIncarnations: 1 << 16, MaxReplicasPerPoP: 1 << 16})
	full := 0
	for inc := uint64(1); inc <= MaxReplicasPerKey+10; inc++ {
		id, ok := st.Intern(rep("forger", inc))
		require.True(t, ok)
		if st.Merge(0, "k", 1, 1, id, 1) == Full {
			full++
		}
	}
	assert.Equal(t, 10, full)
	_, c := totals(st, 0, "k", 1)
	assert.Equal(t, uint64(MaxReplicasPerKey), c)
}

// TestForgetReplicas: replicas no live key references are forgotten and
// their IDs reused; referenced ones and self stay.
func TestForgetReplicas(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxReplicas: 4})
	live, _ := st.Intern(rep("a", 1))
	gone, _ := st.Intern(rep("a", 0))
	_, _ = st.Intern(rep("b", 1))
	_, ok := st.Intern(rep("c", 1))
	require.False(t, ok, "table full")
	require.Equal(t, Merged, st.Merge(0, "k", 5, 5, live, 3))
	require.Equal(t, Merged, st.Merge(0, "old", 3, 3, gone, 2))
	require.Equal(t, 1, st.Sweep(func(RuleID) int64 { return 5 }), "old expires with a#0's entry")

	assert.Equal(t, 2, st.ForgetReplicas(), "a#0 and b#1")
	assert.Equal(t, 2, st.ReplicaCount())
	assert.Equal(t, rep("a", 1), st.Replica(live))
	assert.Equal(t, identity.Replica{}, st.Replica(gone))
	id, ok := st.Intern(rep("c", 1))
	require.True(t, ok, "room again")
	assert.Contains(t, []ReplicaID{gone, live + 2}, id, "a forgotten ID is reused")
	_, c := totals(st, 0, "k", 5)
	assert.Equal(t, uint64(3), c, "referenced counts untouched")
	assert.ElementsMatch(t, []identity.Replica{rep("self", 1), rep("a", 1), rep("c", 1)}, st.Replicas())
}

// TestInternCached: a cache answers for its replica until the store frees
// an ID, which may then name another replica; it never answers for another
// replica or another store.
func TestInternCached(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxReplicas: 3})
	var c InternCache
	a, ok := st.InternCached(rep("a", 1), &c)
	require.True(t, ok)
	again, _ := st.InternCached(rep("a", 1), &c)
	assert.Equal(t, a, again)
	b, _ := st.InternCached(rep("b", 1), &c)
	assert.NotEqual(t, a, b, "another replica is looked up")
	assert.Equal(t, rep("b", 1), st.Replica(b))

	// b holds no count: forgotten, its ID goes to c#1, and the cache, which
	// still names b, must not hand that ID out for b.
	require.Equal(t, Merged, st.Merge(0, "k", 5, 5, a, 3))
	require.Equal(t, 1, st.ForgetReplicas())
	cid, ok := st.Intern(rep("c", 1))
	require.True(t, ok)
	require.Equal(t, b, cid, "the freed ID is reused")
	_, ok = st.InternCached(rep("b", 1), &c)
	require.False(t, ok, "the table is full again: b has no ID to get")

	// Two stores of the same generation: a cache filled by one does not
	// answer for the other.
	s1 := NewStore(StoreConfig{Self: rep("self", 1)})
	s2 := NewStore(StoreConfig{Self: rep("self", 1)})
	_, _ = s2.Intern(rep("y", 1)) // x gets another ID in s2 than in s1
	var sc InternCache
	x1, _ := s1.InternCached(rep("x", 1), &sc)
	x2, ok := s2.InternCached(rep("x", 1), &sc)
	require.True(t, ok)
	assert.NotEqual(t, x1, x2)
	assert.Equal(t, rep("x", 1), s2.Replica(x2))
}

// TestSideEntriesAcrossWindowWrap: remote counts keep their windows when
// the window index crosses a multiple of 2^32 (side entries hold the low 32
// bits of theirs), through merges, a roll-over and the walks.
func TestSideEntriesAcrossWindowWrap(t *testing.T) {
	for _, base := range []int64{1<<32 - 1, 1<<33 - 2, 5} {
		st := NewStore(StoreConfig{Self: rep("self", 1)})
		r, _ := st.Intern(rep("other", 1))
		for k, c := range []uint64{3, 5, 7} { // windows base-1, base, base+1
			if got := st.Merge(0, "k", base, base-1+int64(k), r, c); got != Merged {
				t.Fatalf("base %d: merge %d: %v", base, k, got)
			}
		}
		views, ok := st.View(0, "k", base)
		if !ok || len(views) != 3 {
			t.Fatalf("base %d: views %+v", base, views)
		}
		for k, want := range []uint64{3, 5, 7} {
			if v := views[k]; v.Index != base-1+int64(k) || v.Total != want {
				t.Fatalf("base %d: window %d: %+v, want index %d total %d", base, k, v, base-1+int64(k), want)
			}
		}
		// Raising a count finds its entry; the next window rolls over and
		// keeps the two live ones.
		if got := st.Merge(0, "k", base, base+1, r, 9); got != Merged {
			t.Fatalf("base %d: raise: %v", base, got)
		}
		res := st.Admit(0, "k", at(base+1), 100, 1, false)
		if res.Estimate < 9 || res.Estimate > 14 {
			t.Fatalf("base %d: estimate %v after roll-over, want 5*(1-f)+9", base, res.Estimate)
		}
		var got []string
		st.Entries(func(RuleID) int64 { return base + 1 }, func(_ ReplicaID, e FlushEntry) {
			got = append(got, fmt.Sprintf("%d=%d", e.Window-base, e.Count))
		})
		if want := []string{"0=5", "1=9"}; !slices.Equal(got, want) {
			t.Fatalf("base %d: entries (window-base=count) %v, want %v", base, got, want)
		}
	}
}

// TestRollAfterIdleOf2To32Windows: a key idle for 2^32 windows exactly
// must not read its remote entries' 32-bit windows as live ones.
func TestRollAfterIdleOf2To32Windows(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	r, _ := st.Intern(rep("other", 1))
	const w = int64(1000)
	if got := st.Merge(0, "k", w, w, r, 50); got != Merged {
		t.Fatal(got)
	}
	later := w + 1<<32
	if res := st.Admit(0, "k", at(later), 100, 1, false); res.Estimate != 0 {
		t.Fatalf("estimate %v at window %d: a count of window %d came back", res.Estimate, later, w)
	}
}
