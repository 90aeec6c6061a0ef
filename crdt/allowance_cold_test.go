package crdt

import (
	"math"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In a store's first two horizons the spare room knows where a key is
// spent: a key only this PoP counts (an anycast key) keeps it, and the
// larger room of a key spent here (localSpare), a key another PoP counts
// already is spent across the fleet, and every replica may hold as much
// unseen as this one. Past two horizons the trailing rate, read over the
// time the store has decided, decides as before.
func TestColdStartSpareFollowsSources(t *testing.T) {
	many := &Allowance{Horizon: 100 * ms, PoPs: 60} // 1/60 of the headroom: below a request
	far := identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1)
	for _, tc := range []struct {
		name   string
		others uint64 // another PoP's count of the key
		at     int64  // the decisions' time after the store's first
		want   int
	}{
		{"counted here only", 0, 50 * ms, spareUnseenLocal},
		{"counted by another PoP", 1, 50 * ms, 1},
		{"counted by another PoP, after two horizons", 1, 250 * ms, spareUnseenHalf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
			require.True(t, st.AdmitSplit(0, "other", nowAt(0), 20, 1, true, many).Allowed) // the store's first decision
			if tc.others > 0 {
				id, ok := st.Intern(far)
				require.True(t, ok)
				require.Equal(t, Merged, st.Merge(0, "k", 1, 1, id, tc.others))
			}
			n := 0
			for i := range spareUnseenLocal + 1 {
				if st.AdmitSplit(0, "k", nowAt(tc.at+int64(i)*ms), 20, 1, true, many).Allowed {
					n++
				}
			}
			assert.Equal(t, tc.want, n)
		})
	}
}

// sources counts the members that count a key, and every replica once
// another PoP does, unless that PoP is excluded.
func TestColdStartSources(t *testing.T) {
	a := &Allowance{Horizon: 100 * ms, Members: 3, PoPs: 10}
	self := identity.Replica{PoPID: identity.PoPID{Region: "r", PoP: "p"}, Node: "n1", Incarnation: 1}
	member := identity.Replica{PoPID: self.PoPID, Node: "n2", Incarnation: 1}
	other := identity.PoPReplica(identity.PoPID{Region: "r", PoP: "q"}, 1)
	for _, tc := range []struct {
		name     string
		from     []identity.Replica
		excluded bool
		want     float64
	}{
		{"none", nil, false, 1},
		{"a member, two windows", []identity.Replica{member}, false, 2},
		{"another PoP", []identity.Replica{member, other}, false, 30},
		{"another PoP, excluded", []identity.Replica{other}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewStore(StoreConfig{Self: self, Seed: 5})
			if tc.excluded {
				st.SetExcluded(func(r identity.Replica) bool { return r == other })
			}
			st.Admit(0, "k", nowAt(0), 100, 1, true)
			for _, r := range tc.from {
				id, ok := st.Intern(r)
				require.True(t, ok)
				require.Equal(t, Merged, st.Merge(0, "k", 1, 0, id, 1))
				require.Equal(t, Merged, st.Merge(0, "k", 1, 1, id, 2))
			}
			h := st.hash(0, "k")
			sh := st.shardOf(h)
			i, ok := sh.find(h, 0, "k")
			require.True(t, ok)
			assert.Equal(t, tc.want, sh.sources(st, a, i, &sh.slots[i]))
		})
	}
}

// A fleet that starts at once with a hot key: 300 replicas each admitted
// the key's first request and sent it; 300 ms later the others' counts
// (900 of 1 000) reached every one of them. A replica young enough that
// 900 in its first 300 ms says the fleet spends more than the headroom in
// a lag (rushing) shares a third of the headroom, and holds its one request in
// flight only at its turn: the fleet admits about its share, not one
// request per replica. A replica that has decided for a window reads 900
// as a window's trailing rate, not a rush, and shares the whole headroom:
// the key is past half its limit with less headroom (100) than the fleet
// has replicas (crowded), so it too holds its one request at its turn,
// drawn at twice its share (turns a replica without a request loses).
func TestColdStartTurns(t *testing.T) {
	const replicas = 300
	a := &Allowance{Horizon: 100 * ms, PoPs: replicas}
	far := identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1)
	for _, tc := range []struct {
		name     string
		settled  bool // decided since window 0
		min, max int
	}{
		{"cold start", false, 15, 45}, // about a third of H = 100
		{"settled", true, 120, 280},   // about twice H = 100 (crowdedTurns)
	} {
		t.Run(tc.name, func(t *testing.T) {
			admitted := 0
			for i := range replicas {
				st := NewStore(StoreConfig{Self: rep("self", 1), Seed: uint64(2*i + 1)})
				if tc.settled {
					settled(st)
				}
				require.True(t, st.AdmitSplit(0, "k", nowAt(0), 1000, 1, true, a).Allowed)
				st.FlushAt(abs(0), a.Horizon, func(FlushEntry) {})
				id, ok := st.Intern(far)
				require.True(t, ok)
				require.Equal(t, Merged, st.Merge(0, "k", 1, 1, id, 900))
				if st.AdmitSplit(0, "k", nowAt(300*ms), 1000, 1, true, a).Allowed {
					admitted++
				}
			}
			assert.GreaterOrEqual(t, admitted, tc.min)
			assert.LessOrEqual(t, admitted, tc.max)
		})
	}
}

// turn is true with probability p, drawn apart per key hash and per
// horizon-long period.
func TestTurnFrequency(t *testing.T) {
	horizon := (100 * time.Millisecond).Nanoseconds()
	for _, p := range []float64{0, 0.1, 0.5, 0.9, 1} {
		hits := 0
		const draws = 20000
		for i := range draws {
			if turn(mix64(uint64(i)), int64(i%7)*horizon, horizon, p) {
				hits++
			}
		}
		assert.InDelta(t, p, float64(hits)/draws, 0.02, "p=%v", p)
	}
	assert.False(t, turn(1, 0, 0, 1), "no horizon")
}

// rushing compares a lag's spending at the trailing rate with the
// headroom; rateSpan is the store's time, within a horizon and a window,
// for coldLags horizons.
func TestRushingAndRateSpan(t *testing.T) {
	assert.False(t, rushing(900, 1000, 0.01), "a window's 900: 18 a lag, H = 100")
	assert.True(t, rushing(900, 1000, 1.0/3), "900 in three horizons: 600 a lag")
	assert.False(t, rushing(0, 1000, 1))
	for _, tc := range []struct{ age, width, want int64 }{
		{0, 1000, 100}, {50, 1000, 100}, {300, 1000, 300}, {1200, 1000, 1000},
		{1200, 1e6, 1200}, {coldLags * 100, 1e6, 1e6},
	} {
		assert.Equal(t, tc.want, rateSpan(tc.age, 100, tc.width), "age %d, width %d", tc.age, tc.width)
	}
	st := NewStore(StoreConfig{Self: rep("self", 1)})
	assert.Zero(t, st.decidedFor(5, 100), "no decision yet")
	st.noteBorn(1000)
	st.noteBorn(2000)
	assert.Equal(t, int64(1500), st.decidedFor(2500, 100), "the first decision counts")
	assert.Zero(t, st.decidedFor(950, 100), "a step back within a horizon")
	assert.Equal(t, int64(math.MaxInt64), st.decidedFor(850, 100), "a step back beyond a horizon: for ever")
	assert.Equal(t, int64(math.MaxInt64), st.decidedFor(1200, 100), "from then on")
	st.noteBorn(3000)
	assert.Equal(t, int64(math.MaxInt64), st.decidedFor(3000, 100))
}

// In a store's first coldLags horizons a key spent at this PoP only may
// hold up to spareUnseenLocal unseen admits within half its limit; a key
// another PoP counts, the spare room's five; a key past half its limit,
// the split's share; and a key spent here long after the cold start, the
// spare room's five again.
func TestLocalSpareKnowsWhereKeyIsSpent(t *testing.T) {
	twelve := &Allowance{Horizon: 100 * ms, PoPs: 12} // 1/12 of 50: 4.2 requests
	far := identity.PoPReplica(identity.PoPID{Region: "far", PoP: "a"}, 1)
	t0 := time.Second.Nanoseconds()
	for _, tc := range []struct {
		name   string
		others uint64 // another PoP's count of the key
		limit  uint64
		age    int64 // how long the store has decided at the first request
		want   int
	}{
		{"counted here only", 0, 50, 500 * ms, spareUnseenLocal},
		{"counted by another PoP", 1, 50, 500 * ms, spareUnseenHalf},
		{"counted here only, a limit of 12", 0, 12, 500 * ms, 6}, // 2 x 6 <= 12 < 2 x 7
		{"counted here only, past the cold start", 0, 50, coldLags * 100 * ms, spareUnseenHalf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
			require.True(t, st.AdmitSplit(0, "other", nowAt(t0-tc.age), 50, 1, true, twelve).Allowed) // the store's first decision
			if tc.others > 0 {
				id, ok := st.Intern(far)
				require.True(t, ok)
				require.Equal(t, Merged, st.Merge(0, "k", 1, 1, id, tc.others))
			}
			n := 0
			for i := range spareUnseenLocal + 2 {
				if st.AdmitSplit(0, "k", nowAt(t0+int64(i)*ms), tc.limit, 1, true, twelve).Allowed {
					n++
				}
			}
			assert.Equal(t, tc.want, n)
		})
	}
}

// localSpare is pure: it adds to spare's room only beyond spareUnseenHalf,
// up to spareUnseenLocal, within half the limit.
func TestLocalSpare(t *testing.T) {
	for _, tc := range []struct {
		k, u, n, limit float64
		want           bool
	}{
		{0, spareUnseenHalf, 1, 50, false}, // spare's
		{0, spareUnseenHalf + 1, 1, 50, true},
		{0, spareUnseenLocal, 1, 50, true},
		{0, spareUnseenLocal + 1, 1, 1000, false},
		{20, spareUnseenLocal, 1, 50, false}, // 2 x (20 + 7 + lag) > 50
		{0, spareUnseenLocal, 2, 20, false},  // two members may hold as much
	} {
		assert.Equal(t, tc.want, localSpare(tc.k, tc.u, tc.n, tc.limit, 0.01), "%+v", tc)
	}
}
