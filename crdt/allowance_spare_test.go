package crdt

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key below three quarters of its limit, spread over many replicas: a replica's
// share of the headroom is a fraction of a request, yet a second and a
// third request within one lag are admitted (random arrivals bunch up),
// while a fourth is not (within half the limit, a fourth and a fifth are
// too, a sixth not), and a key past three quarters of its limit is split
// as before (with a second in flight: secondInFlight).
func TestSpareFarFromLimit(t *testing.T) {
	many := &Allowance{Horizon: 100 * ms, PoPs: 60} // 1/60 of the headroom: below a request
	t0 := time.Second.Nanoseconds()
	for _, tc := range []struct {
		name   string
		others uint64 // counts of three other PoPs in the current window
		want   int
	}{
		{"far from the limit", 1, spareUnseenHalf}, // k = 3 of 20: 2 x (3 + 5 + lag) <= 20
		{"past half the limit", 2, spareUnseen},    // k = 6: 2 x (6 + 4 + lag) > 20
		{"near three quarters", 4, 2},              // k = 12: 4 x (12 + 2 + lag) <= 3 x 20 < 4 x (12 + 3 + lag)
		{"past three quarters", 5, 2},              // k = 15: 4 x (15 + 2 + lag) > 3 x 20; a second in flight
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := withOthers(t, "k", tc.others, "a", "b", "c")
			n := 0
			for i := range 6 {
				if st.AdmitSplit(0, "k", nowAt(t0+int64(i)*ms), 20, 1, true, many).Allowed {
					n++
				}
			}
			assert.Equal(t, tc.want, n)
		})
	}
}

// spare is pure: the spare room closes as the trailing rate fills the
// headroom, and never holds more than spareUnseen past half the limit, nor
// more than spareUnseenHalf below it.
func TestSpareBounds(t *testing.T) {
	hw := 0.01 // a horizon of a hundredth of the window
	for _, tc := range []struct {
		k, u, limit float64
		want        bool
	}{
		{0, 1, 20, true},
		{0, spareUnseen, 20, true},
		{0, spareUnseenHalf, 20, true}, // within half the limit: 2 x 5 <= 20
		{0, spareUnseenHalf, 9, false},
		{6, spareUnseen + 1, 20, false}, // 2 x (6 + 4 + 0.36) > 20
		{0, spareUnseenHalf + 1, 1000, false},
		{11, 3, 20, true},  // 4 x (11 + 3 + 0.66) = 58.6
		{12, 3, 20, false}, // 4 x (12 + 3 + 0.72) = 62.9
		{600, 2, 1000, true},
		{720, 2, 1000, false}, // 4 x (720 + 2 + 43.2)
	} {
		assert.Equal(t, tc.want, spare(tc.k, tc.u, 1, tc.limit, hw), "k=%v u=%v limit=%v", tc.k, tc.u, tc.limit)
	}
}

// A key whose own counts every replica holds is armed before its next
// admit: a request right after it finds only that admit unseen, not the
// held ones too (an entry made then would take them all for unseen).
func TestArmedKeyKnowsHeldCounts(t *testing.T) {
	two := &Allowance{Horizon: 100 * ms, PoPs: 2}
	for _, armed := range []bool{true, false} {
		t.Run("armed="+strconv.FormatBool(armed), func(t *testing.T) {
			st := withOthers(t, "k", 10, "a") // 10 of 15: no spare room
			t0 := time.Second.Nanoseconds()
			a := two
			if !armed {
				a = nil // counted without the allowance: no entry armed
			}
			require.True(t, st.AdmitSplit(0, "k", nowAt(t0), 15, 1, true, a).Allowed)
			for at := t0 + ms; at <= t0+2*time.Second.Nanoseconds(); at += 50 * ms {
				st.FlushAt(abs(at), two.Horizon, func(FlushEntry) {})
			}
			t1 := t0 + 3*time.Second.Nanoseconds()
			require.True(t, st.AdmitSplit(0, "k", nowAt(t1), 15, 1, true, a).Allowed)
			// H = 15 - 11, half of it 2: room for a second unseen admit
			// when the held one is known held; none when it counts as
			// unseen too (H = 15 - 10, half of it 2.5 < 3).
			got := st.AdmitSplit(0, "k", nowAt(t1+ms), 15, 1, true, two).Allowed
			assert.Equal(t, armed, got)
		})
	}
}

// Near the limit a replica that refused nothing lately may hold a second
// request in flight when the headroom covers it and the fleet's admits in
// a lag; one that refused within two horizons holds one.
func TestSecondInFlight(t *testing.T) {
	hw := 0.01
	for _, tc := range []struct {
		k, u  float64
		calm  bool
		want  bool
		about string
	}{
		{900, 2, true, true, "H = 100 covers 2 + 1.5 x 18"},
		{900, 3, true, false, "three in flight"},
		{900, 2, false, false, "refused lately"},
		{980, 2, true, false, "H = 20 < 2 + 1.5 x 19.6"},
	} {
		assert.Equal(t, tc.want, secondInFlight(tc.k, tc.u, 1, 1000, hw, tc.calm), tc.about)
	}
}

// A key whose admits follow each other within a lag from its first one on
// (an anycast key at one PoP, a new client's first requests) knows which
// of them every replica holds: its entry, made at its first split, learnt
// them from the shard's records of the flushes of the last two horizons.
// Its sixth admit, with the first held and four unseen, is admitted (the
// held count is all the fleet holds of the key, and this replica's share
// is the whole headroom); an entry that took all five for unseen split the
// headroom evenly, and refused it. The records follow the slot when the
// table grows (TestSentRecordsFollowRehash). This holds in the store's
// first window; later, and for a key another PoP counts
// (TestSpreadKeyLearnsNothingFromRecords), the entry learns nothing from
// them.
func TestKeyKnowsHeldCountsWithinALag(t *testing.T) {
	twelve := &Allowance{Horizon: 100 * ms, PoPs: 12} // 1/12 of 50: 4.2 requests
	t0 := 3 * time.Second.Nanoseconds()               // past the cold start's 16 horizons: the spare room of five
	for _, tc := range []struct {
		name string
		a    *Allowance // the first admit's allowance
		born int64      // the store's first decision
		want bool
	}{
		{"counted with the allowance from the first admit", twelve, abs(0), true},
		{"counted without it at first", nil, abs(0), true},
		{"past the store's first window", twelve, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewStore(StoreConfig{Self: rep("self", 1), Seed: 3})
			st.noteBorn(tc.born)
			require.True(t, st.AdmitSplit(0, "k", nowAt(t0), 50, 1, true, tc.a).Allowed)
			st.FlushAt(abs(t0+10*ms), twelve.Horizon, func(FlushEntry) {}) // held from t0+110ms
			for i, at := range []int64{50, 70, 90, 105} {
				require.True(t, st.AdmitSplit(0, "k", nowAt(t0+at*ms), 50, 1, true, twelve).Allowed, "admit %d", i+2)
				if at == 50 || at == 105 {
					st.FlushAt(abs(t0+(at+5)*ms), twelve.Horizon, func(FlushEntry) {})
				}
			}
			assert.Equal(t, tc.want, st.AdmitSplit(0, "k", nowAt(t0+115*ms), 50, 1, true, twelve).Allowed, "sixth admit, the first one held")
		})
	}
}

// Own counts found all held stay held when the horizon grows afterwards:
// a key far below its limit is not refused a millisecond after its held
// counts were read, because the fleet's horizon rose by more than that.
func TestHeldCountsOutlastHorizonGrowth(t *testing.T) {
	a := &Allowance{Horizon: 100 * ms, PoPs: 12}
	t0 := time.Second.Nanoseconds()
	st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: 3}))
	for i := range 5 {
		require.True(t, st.AdmitSplit(0, "k", nowAt(t0+int64(i)*ms), 50, 1, true, nil).Allowed)
	}
	st.FlushAt(abs(t0+10*ms), a.Horizon, func(FlushEntry) {})
	st.FlushAt(abs(t0+200*ms), a.Horizon, func(FlushEntry) {}) // the five are held
	t1 := t0 + 300*ms
	require.True(t, st.AdmitSplit(0, "k", nowAt(t1), 50, 1, true, a).Allowed)
	grown := &Allowance{Horizon: 105 * ms, PoPs: 12}
	for i := range 4 {
		assert.True(t, st.AdmitSplit(0, "k", nowAt(t1+int64(i+1)*ms), 50, 1, true, grown).Allowed, "admit %d after the horizon grew", i+1)
	}
}

// The shard keeps its records of a flush's sends for two horizons: past
// the first they no longer mark the slot as recent, past the second they
// are gone, and the flushes stop visiting the shard.
func TestSentRecordsKeptTwoHorizons(t *testing.T) {
	h := 100 * ms
	st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: 3}))
	require.True(t, st.AdmitSplit(0, "k", nowAt(0), 50, 1, true, split).Allowed)
	kept := func() (n int, recent bool) {
		for i := range st.shards {
			sh := &st.shards[i]
			n += len(sh.sent) - sh.sentKeep
			for j := range sh.slots {
				recent = recent || sh.slots[j].flags&(flagLive|flagRecent) == flagLive|flagRecent
			}
		}
		return n, recent
	}
	for _, tc := range []struct {
		at     int64
		n      int
		recent bool
	}{
		{10 * ms, 1, true},   // sent
		{150 * ms, 1, false}, // held: kept
		{250 * ms, 0, false}, // forgotten
	} {
		st.FlushAt(abs(tc.at), h, func(FlushEntry) {})
		n, recent := kept()
		assert.Equal(t, tc.n, n, "records after the flush at %v", time.Duration(tc.at))
		assert.Equal(t, tc.recent, recent, "recent after the flush at %v", time.Duration(tc.at))
	}
	for i := range st.shards {
		assert.False(t, st.shards[i].work.Load(), "shard %d still has work", i)
	}
}

// The records of a slot's recent sends follow it when its shard's table
// grows, those of flushes older than its unsent admits too (a slot with
// unsent admits is not recorded again at its new position).
func TestSentRecordsFollowRehash(t *testing.T) {
	st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: 3}))
	require.True(t, st.AdmitSplit(0, "k", nowAt(0), 50, 1, true, split).Allowed)
	st.FlushAt(abs(10*ms), split.Horizon, func(FlushEntry) {})
	require.True(t, st.AdmitSplit(0, "k", nowAt(20*ms), 50, 1, true, split).Allowed) // unsent
	h := st.hashBytes(0, []byte("k"))
	sh := st.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.rehash(st, 4*len(sh.slots))
	p, ok := sh.find(h, 0, "k")
	require.True(t, ok)
	var ats []int64
	for _, r := range sh.sent[sh.sentKeep:] {
		if r.pos == p && r.fp == sh.fingerprint(st, p, &sh.slots[p]) {
			ats = append(ats, r.at)
		}
	}
	assert.Equal(t, []int64{abs(10 * ms)}, ats)
}

// A key another PoP counts takes nothing from the records of its sends:
// its own counts held say nothing of the others' counts of the same
// moments, still on their way, and a share read from them alone would be
// too large (a cut of 1 s windows went to 1.205 of the limit). Its entry,
// made at its first split, takes its own admits for unseen as before.
func TestSpreadKeyLearnsNothingFromRecords(t *testing.T) {
	twelve := &Allowance{Horizon: 100 * ms, PoPs: 12}
	t0 := 3 * time.Second.Nanoseconds()
	st := withOthers(t, "k", 1, "a")
	st.born.Store(abs(0)) // in its first window
	require.True(t, st.AdmitSplit(0, "k", nowAt(t0), 50, 1, true, nil).Allowed)
	st.FlushAt(abs(t0+10*ms), twelve.Horizon, func(FlushEntry) {})
	for i, at := range []int64{50, 70, 90, 105} {
		require.True(t, st.AdmitSplit(0, "k", nowAt(t0+at*ms), 50, 1, true, twelve).Allowed, "admit %d", i+2)
		if at == 50 || at == 105 {
			st.FlushAt(abs(t0+(at+5)*ms), twelve.Horizon, func(FlushEntry) {})
		}
	}
	assert.False(t, st.AdmitSplit(0, "k", nowAt(t0+115*ms), 50, 1, true, twelve).Allowed, "sixth admit, all five taken for unseen")
}
