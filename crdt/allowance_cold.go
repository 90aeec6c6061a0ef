package crdt

import "math"

// The cold start.
//
// The near-limit allowance (allowance.go) rests on two readings of the
// counts every replica holds (k): how fast the fleet spends the key (its
// trailing rate, k per window), and, for the spare room, that the other
// replicas hold next to nothing unseen when that rate is low. A fleet that
// starts at once, with a key hot everywhere, breaks both in its first
// lags: k was gathered in the time since the start, not over a window, and
// every replica holds its first admits unseen at the same moment. Three
// rules follow, each from what the replica can know then.
//
//   - The rate is read over the time this store has decided (rateSpan),
//     not over a window, for its first coldLags horizons (or until it has
//     decided for a window, if shorter): k admits in the first 300 ms are
//     a rate of k per 300 ms.
//
//   - Until the store has decided for two horizons, the others' counts of
//     its first lag have not all reached it, and what it holds of a key
//     says where the key is spent rather than how much: a key that another
//     PoP or region already counts is spent across the fleet at once, and
//     every replica may hold as much unseen as this one, so the spare room
//     and the second in flight must hold for all of them (n = Replicas in
//     spare); a key that only this PoP counts (an anycast key, a new
//     client's first requests) is spent here, by this replica and the
//     members that count it (sources). The spare room of a key far below
//     its limit on one PoP is therefore untouched, while a hot key spread
//     over the fleet gets its share of the headroom and no more as soon as
//     the first count of another PoP arrives. Before that, in the key's
//     very first lag, a replica knows nothing of the others, and the spare
//     room bounds what it holds (spareUnseenHalf; spareUnseenLocal for a
//     key no other PoP counts, see localSpare, for the store's first
//     coldLags horizons).
//
//   - While the fleet, at that rate, would admit more in a lag than the
//     headroom holds (rushing), the counts it admitted in the last lag are
//     not all held yet. Turns are drawn per horizon-long period and a lag
//     is about two horizons: what the fleet admitted in the two periods
//     before may still be in flight, so a replica shares a third of the
//     headroom (rushedParts; a half let a fleet of 300 PoPs in 25 regions
//     reach 1.14 of a hot key's limit in its first half second, a third
//     1.10), and the one request in flight
//     that a replica with nothing unseen may always hold is given only at
//     its turn when its share is below one request (turn): the fleet's
//     requests in flight then add up to about its share of the headroom,
//     not to one per replica.
//
// All of it holds for the store's first coldLags horizons at most: by then
// every replica has held the others' counts of the first lags many times
// over, and what is in flight is what the split already bounds, but for
// the one request in flight of a replica with nothing unseen: a key past
// half its limit with less headroom than the fleet has replicas (crowded,
// in split) takes turns for it in a running fleet too. Longer, it
// only errs: cutting the headroom moved the admits of every key that nears
// its limit in a fleet's first window later in it, where the sliding
// estimate lets more through, and a rate read over the store's time rather
// than over a month-long window is no rate of that window. Past them, or
// when its clock stepped back behind its first decision (decidedFor), a
// store decides as before. A node that restarts in a running fleet is a
// young store too: it reads the counts it gets back over its own time,
// which errs towards refusing for at most a window.

// coldLags is how many horizons the cold start's rules last at most: a
// few lags each for the first counts to travel, be held and be read
// again, with room to spare.
const coldLags = 16

// rateSpan returns the time over which a store that has decided for age
// reads the trailing rate of a key whose window is width long: age, at
// least a horizon, for its first coldLags horizons at most; the window
// after them, or when it is shorter.
func rateSpan(age, horizon, width int64) int64 {
	if age >= coldLags*horizon {
		return width
	}
	return min(width, max(age, horizon, 1))
}

// rushing reports whether a fleet spending at the trailing rate of k (per
// span; hw a horizon over the span) admits more in a lag (about two
// horizons) than the headroom limit - k holds.
func rushing(k, limit, hw float64) bool {
	return k*2*hw > limit-k
}

// sources returns how many replicas may hold as many unseen admits of slot
// i's key as this one, in a store's first two horizons (see the cold
// start): every replica (a.Replicas) when a replica of another PoP or
// region, not excluded, counts the key in its live windows; otherwise this
// replica and the members that count it. The caller holds sh.mu.
func (sh *shard) sources(s *Store, a *Allowance, i int32, sl *slot) float64 {
	if sl.flags&flagSide == 0 {
		return 1
	}
	ex := s.excluded.Load()
	n, last := 1, ReplicaID(0)
	for _, se := range sh.side.get(i) {
		if j := se.win(sl.win) - (sl.win - 1); j != 0 && j != 1 || se.count == 0 {
			continue
		}
		switch rep := se.rep(); {
		case se.member():
			if rep != last {
				n++
				last = rep
			}
		case ex != nil && ex.has(rep):
		default:
			return float64(a.Replicas())
		}
	}
	return float64(n)
}

// spareUnseenLocal is how many requests a replica may hold unseen in the
// spare room of a key that no other PoP or region counts, while the key
// stays within half its limit, in its store's first coldLags horizons
// (localSpare).
const spareUnseenLocal = 8

// localSpare reports whether a replica in its store's first coldLags
// horizons may hold u unseen admits, more than spareUnseenHalf but at most
// spareUnseenLocal, of a key that no other PoP or region counts
// (spentHere), while the key stays within half its limit as in spare (n
// replicas that may hold as much unseen, k per span, hw a horizon over the
// span). A key spent at one PoP (an anycast key) holds every admit of its
// first lag unseen: until its first count is held, when its share becomes
// the whole headroom (split), the split knows nothing of where it is spent
// and gives each replica an equal part of the headroom. At a fleet's cold
// start every key is in its first lag at once, and over many keys a sixth,
// a seventh or an eighth request within it happens. A key that surges
// everywhere at once looks the same to each replica only until the first
// counts of another PoP arrive, a flush interval and the nearest PoP's
// latency after its first admits; spare decides from then on. Until then
// the fleet may go over by spareUnseenLocal - spareUnseenHalf requests per
// replica more than with spare alone, where the key's requests at each
// replica in that time exceed the spare room's five: a hot key at a cold
// start did not (TestColdStartAcrossTheClass in sim), while a new key
// surging everywhere at 20 times its limit on 1 s windows in a running
// fleet went from 1.20 of its limit to 1.40 (scenario new-key-surge-1s),
// which is why a running fleet keeps the spare room's five: a new
// client's first lag is rarely as crowded as a cold start's.
func localSpare(k, u, n, limit, hw float64) bool {
	fleet := k + n*u + 3*k*2*hw
	return u > spareUnseenHalf && u <= spareUnseenLocal && 2*fleet <= limit
}

// spentHere reports whether no replica of another PoP or region, not
// excluded, counts slot i's key in its live windows: n is what sources
// returned for it, or 1 when the caller did not ask (see split). The
// caller holds sh.mu.
func (sh *shard) spentHere(s *Store, a *Allowance, i int32, sl *slot, n float64) bool {
	if n == 1 {
		n = sh.sources(s, a, i, sl)
	}
	return n < float64(a.Replicas())
}

// turn reports whether a replica whose share of the headroom is p
// requests (below one) may hold one unseen request of the key whose hash
// is h in the horizon-long period around now: a draw from h and the
// period, true with probability p. Every replica draws apart (its store
// hashes keys with its own seed), so the fleet's unseen admits of a period
// add up to about its share of the headroom, where each replica holding
// one would add up to the number of replicas.
func turn(h uint64, now, horizon int64, p float64) bool {
	if horizon <= 0 || p <= 0 {
		return false
	}
	x := mix64(h ^ uint64(now/horizon)*0x9e3779b97f4a7c15)
	return float64(x>>11) < p*(1<<53)
}

// decidedFor returns how long this store has decided with an allowance at
// now: since its first such decision, 0 before it. A store whose clock
// stepped back more than a horizon behind its first decision (a fleet
// clock correcting a skewed one) cannot tell how long it has decided, and
// has decided for ever from then on: it reads the trailing rate over a
// window, as before the cold start's rules.
func (s *Store) decidedFor(now, horizon int64) int64 {
	switch b := s.born.Load(); {
	case b == unborn:
		return 0
	case b == bornSteppedBack:
		return math.MaxInt64
	case now < b-horizon:
		s.born.Store(bornSteppedBack)
		return math.MaxInt64
	default:
		return max(now-b, 0)
	}
}

// DecidingSince returns the time (Unix nanoseconds, the clock the store's
// decisions were given) of this store's first decision with a near-limit
// allowance, and false before it or once its clock stepped back behind it.
// Safe for concurrent use.
func (s *Store) DecidingSince() (int64, bool) {
	b := s.born.Load()
	return b, b != unborn && b != bornSteppedBack
}

// noteBorn records the time of the store's first decision with an
// allowance (decidedFor).
func (s *Store) noteBorn(t int64) {
	if s.born.Load() == unborn {
		s.born.CompareAndSwap(unborn, t)
	}
}

// unborn is Store.born before the first decision with an allowance;
// bornSteppedBack once the clock stepped back behind it (decidedFor).
const (
	unborn          = math.MinInt64
	bornSteppedBack = math.MinInt64 + 1
)
