package crdt

import (
	"math"
	"sync/atomic"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/window"
)

// The near-limit allowance.
//
// A replica's admits reach the others only after the replication lag: the
// wait for its next flush, then the horizon (the hop to the member that
// publishes the key's PoP total, the speaker's delay, the network). Until
// then every replica decides on room that the others may be spending too.
// Far from the limit that does no harm; near it, each replica's unseen
// admits add up, by the rate times the lag times the number of replicas.
//
// So near the limit the remaining headroom is split. Let K be the count every
// replica already holds: the estimate minus this replica's own admits that
// the others cannot have seen yet (U, those after its last flush older than
// the horizon). H = limit - K is the headroom left to the whole fleet, and
// replica i may have at most w_i x H of its own admits unseen, where w_i is
// its share of K, computed from counts every replica holds alike, in two
// levels as the counts travel: its PoP's part of K (its own seen count and
// its members' over K, at least 1/PoPs), times its part of the PoP's (its
// own seen count over the PoP's, at least 1/Members). The replicas' unseen
// admits therefore add up to about H, and the fleet stays at the limit. A
// key no replica has counted yet is split evenly (a cold start, or a new
// key under attack everywhere at once); a node new to a key its PoP already
// counts gets a member's share of the PoP's part.
//
// A replica's unseen admits free its share again once the others hold
// them, a flush wait and a horizon after each: at the limit it admits
// about its share per such a lag. Replicas whose paths differ would then
// take parts of the admits that follow their lags, not their shares (a node
// alone in its PoP publishes its own counts, where a PoP's members reach
// the others through its publisher a flush slot later: at even demand a
// one-node PoP took 0.67 of a key's admits beside a three-node PoP). So a
// replica whose path is quicker than the fleet's slowest (Allowance.Reach)
// scales its share by the two lags (pace), and every replica admits its
// share per the same lag; the scaled shares add up to less than the
// headroom, never more. Only past half the limit, where the admits at the
// limit are split, and not in a rushed cold start: below half, a replica's
// room goes to requests that bunch up (keys of 100 000 anycast clients at
// 0.4 of their limit had two refused when their shares were scaled too).
//
// A replica with nothing unseen may always admit one request (the weights
// are fractions of units): near the limit a fleet of n replicas exceeds it
// by at most n-1 requests, whatever the rate, where without the split each
// replica spends everything it sees during the lag. A replica that has not
// refused the key lately may hold a second one (secondInFlight): a mild
// overload then loses fewer requests to the split, and a surge on a key
// nobody was refusing goes over by at most 2n-1 in its first lag. Such a
// calm replica may also use its part of the headroom that the fleet's
// average unseen admits leave (pooledRoom), within the random spread of its
// own: the replicas' random peaks then share one margin rather than each
// keeping its own, and the fleet goes over by at most pooledPart of the
// limit for it. Far from the limit a
// replica may hold a few requests unseen beyond its share (spare), so that
// a key below three quarters of its limit spread thinly over many replicas
// is not refused when requests bunch up at one of them.
//
// Far from the limit nothing is read beyond the slot: a replica whose own
// count of both live windows, plus the request, is within 1/Replicas of the
// headroom the estimate leaves cannot break the split (U is at most that
// count, w_i at least 1/Replicas). Nor does a key whose own counts were all
// sent longer than a horizon ago (U = 0): each slot says so in spare bits,
// flagRecent and the sequence number of the flush that last sent its own
// counts (sentSeq), cleared by a per-shard list of recent sends (sentRec)
// once they are older than the horizon. That list holds the keys sent within
// a horizon, like the dirty list the keys changed since the last flush.
// Only a key with admits that may be unseen gets an entry in the shard's
// hot table (bounded by StoreConfig.MaxHotKeys), which keeps the own counts
// of its last flushes, or one whose next few admits may be (armHot); an
// entry made while the key's own counts were sent within a horizon takes
// the flushes that sent them from the shard's records of the last two
// horizons (seedHot). A key that finds the table full is decided as if all
// its own counts were unseen, which errs towards rejecting.
//
// AdmitSplit counts on FlushAt: a store flushed with Flush (no time) keeps
// no record of its sends.

// Allowance configures the near-limit split for one call of AdmitSplit.
// The zero value, a single replica, or Horizon 0, splits nothing.
type Allowance struct {
	// Horizon is how long after a flush (nanoseconds, on the clock of the
	// times passed to FlushAt and AdmitSplit) every other replica holds the
	// own counts that flush sent.
	Horizon int64
	// Members is how many nodes of the own PoP may admit the key, this one
	// included; PoPs how many PoPs, this one included. Replicas whose
	// counts are its members' (see Store) make up the PoP's part.
	Members, PoPs int
	// Reach is the horizon of the fleet's slowest replicas (0: Horizon).
	// A replica's unseen admits free its share once they are held, so it
	// admits about its share per flush wait and horizon: one with a
	// shorter horizon than Reach scales its share by the two lags, so
	// that the shares, not the paths, decide what each replica admits
	// at the limit.
	Reach int64
}

// Replicas is how many replicas may admit the key: Members x PoPs.
func (a *Allowance) Replicas() int { return max(a.Members, 1) * max(a.PoPs, 1) }

// on reports whether a splits anything.
func (a *Allowance) on() bool { return a != nil && a.Horizon > 0 && a.Replicas() > 1 }

// DefaultMaxHotKeys is the default StoreConfig.MaxHotKeys.
const DefaultMaxHotKeys = 1 << 14

// hotSnaps is how many flushes a hot key remembers.
const hotSnaps = 4

// hotSnap is a hot key's own counts as one flush sent them.
type hotSnap struct {
	at  int64     // the flush's time
	win int64     // the slot's window then
	own [2]uint64 // the own counts of windows win-1 and win then
}

// hotEntry is the side state of a key near its limit: the own counts of its
// last flushes, oldest first. No pointers, so the GC never scans the slab.
type hotEntry struct {
	snaps [hotSnaps]hotSnap
	used  int64 // the last decision that read it
	// denied is when this replica last denied the key (0: not since the
	// entry was made).
	denied int64
	// dcost is the cost this replica denied of windows dwin-1 and dwin,
	// counted whole from window dfrom on (see OwnDemand).
	dcost [2]uint64
	dwin  int64
	dfrom int64
	pos   int32 // the slot's position
	n     uint8
}

// deny counts cost denied in window idx (a decision of an older window,
// after a clock stepped back, is left out).
func (e *hotEntry) deny(idx int64, cost uint64) {
	switch d := idx - e.dwin; {
	case d < 0:
		return
	case d == 1:
		e.dcost = [2]uint64{e.dcost[1], 0}
	case d > 1:
		e.dcost = [2]uint64{}
	}
	e.dwin = idx
	e.dcost[1] = satAdd(e.dcost[1], cost)
}

// deniedIn returns the cost counted denied in window win (see deny), and
// whether the entry counted that window whole.
func (e *hotEntry) deniedIn(win int64) (uint64, bool) {
	if win < e.dfrom {
		return 0, false
	}
	switch win {
	case e.dwin:
		return e.dcost[1], true
	case e.dwin - 1:
		return e.dcost[0], true
	}
	return 0, win > e.dwin
}

// hotSample is how many hot entries a full hot table looks at to evict one.
const hotSample = 8

// push records that the flush at at sent own counts own of window win. A
// full ring drops its oldest flush once the next one is older than the
// horizon (no later query needs the oldest then), and otherwise overwrites
// its newest, which only makes later queries see an older flush.
func (e *hotEntry) push(at, horizon, win int64, own [2]uint64) {
	if e.n > 0 {
		if last := &e.snaps[e.n-1]; last.win == win && last.own == own {
			return // nothing new was sent
		}
	}
	s := hotSnap{at: at, win: win, own: own}
	switch {
	case int(e.n) < hotSnaps:
		e.snaps[e.n] = s
		e.n++
	case e.snaps[1].at <= at-horizon:
		copy(e.snaps[:], e.snaps[1:])
		e.snaps[hotSnaps-1] = s
	default:
		e.snaps[hotSnaps-1] = s
	}
}

// held records that every replica holds the own counts own of window win:
// earlier records say less, and are dropped. Held counts stay held however
// the horizon moves later, so the record is dated as sent long ago (a
// record dated a horizon back would read as unseen again once the horizon
// grew by more than the time since: a key far below its limit was refused
// two milliseconds after it was found all held).
func (e *hotEntry) held(win int64, own [2]uint64) {
	e.snaps[0] = hotSnap{at: heldLongAgo, win: win, own: own}
	e.n = 1
}

// heldLongAgo dates a hot entry's record of own counts every replica holds
// (held): before any flush, so that every horizon has passed since.
const heldLongAgo = math.MinInt64

// seen returns the own counts of windows win-1 and win that every replica
// holds at now: those of the latest flush at or before now-horizon.
func (e *hotEntry) seen(now, horizon, win int64) (s0, s1 uint64) {
	for k := int(e.n) - 1; k >= 0; k-- {
		s := &e.snaps[k]
		if s.at > now-horizon {
			continue
		}
		switch s.win {
		case win:
			return s.own[0], s.own[1]
		case win - 1:
			return s.own[1], 0
		}
		return 0, 0
	}
	return 0, 0
}

// matures returns how long until the next flush of e that others do not
// hold at now will be held by them: horizon when no flush is pending.
func (e *hotEntry) matures(now, horizon int64) int64 {
	for k := 0; k < int(e.n); k++ {
		if at := e.snaps[k].at; at > now-horizon {
			return at + horizon - now
		}
	}
	return horizon
}

// sentRec records that the flush at at sent the own counts of the slot at
// pos (whose key hashes to fp) as they were then. A record older than the
// horizon clears the slot's flagRecent, unless the slot changed since (a
// later record, or unsent admits, speak for it) or another key took its
// position (fp).
type sentRec struct {
	at, win int64
	own     [2]uint64
	pos     int32
	fp      uint32
	seq     uint8 // the flush's sequence number, modulo 64
}

// fingerprint returns the high bits of the hash of slot i's key.
func (sh *shard) fingerprint(s *Store, i int32, sl *slot) uint32 {
	return uint32(s.hashBytes(sl.rule, sh.keyBytes(i)) >> 32)
}

// sentNow records that the flush at at (sequence number seq) sent slot
// i's own counts; the caller holds sh.mu.
func (sh *shard) sentNow(s *Store, at int64, seq uint8, i int32, sl *slot) {
	seq &= 63
	sl.setSentSeq(seq)
	sl.flags |= flagRecent
	sh.sent = append(sh.sent, sentRec{at: at, win: sl.win, own: sl.own, pos: i, fp: sh.fingerprint(s, i, sl), seq: seq})
	sh.noteWork()
}

// resent records a slot with flagRecent that moved to position i, as sent
// by the same flush as before but no earlier than the last flush. A slot
// with unsent admits needs no record: the next flush sends it and records
// that.
func (sh *shard) resent(s *Store, i int32, sl *slot) {
	if sl.dirty&dirtyOwn == 0 {
		sh.sentNow(s, s.lastFlush.Load(), sl.sentSeq(), i, sl)
	}
}

// expireSent clears flagRecent of the slots whose own counts no flush after
// cutoff sent and that changed in no other way since, and forgets the
// records of flushes at or before keep (see seedHot). The caller holds
// sh.mu.
func (sh *shard) expireSent(s *Store, cutoff, keep int64) {
	for sh.sentHead < len(sh.sent) && sh.sent[sh.sentHead].at <= cutoff {
		r := &sh.sent[sh.sentHead]
		sh.sentHead++
		if r.pos < 0 || int(r.pos) >= len(sh.slots) {
			continue
		}
		sl := &sh.slots[r.pos]
		if sl.flags&(flagLive|flagRecent) != flagLive|flagRecent || sl.sentSeq() != r.seq ||
			sl.dirty&dirtyOwn != 0 || !sameOwn(sl, r) {
			continue // another key, or sent again since
		}
		if sh.fingerprint(s, r.pos, sl) == r.fp {
			sl.flags &^= flagRecent
		}
	}
	for sh.sentKeep < sh.sentHead && sh.sent[sh.sentKeep].at <= keep {
		sh.sentKeep++
	}
	if sh.sentKeep == len(sh.sent) {
		sh.sent, sh.sentHead, sh.sentKeep = sh.sent[:0], 0, 0
	} else if sh.sentKeep > len(sh.sent)/2 {
		n := copy(sh.sent, sh.sent[sh.sentKeep:])
		sh.sent, sh.sentHead, sh.sentKeep = sh.sent[:n], sh.sentHead-sh.sentKeep, 0
	}
}

// seedHot gives slot i's new hot entry e the flushes that sent the slot's
// own counts within the last two horizons, oldest first, from the shard's
// records of them: an entry made while the slot's counts were sent within
// a horizon (a key whose admits follow each other within a lag, never
// quiescent) then knows which of them every replica holds, where it took
// them all for unseen. A key sent at least once a horizon has its last
// send held by every replica among them. Only a key that no other PoP or
// region counts is seeded (spentHere), in the store's first window (or
// first coldLags horizons, if longer), when every key is new and a key's
// admits follow each other within a lag from its first one on: the
// others' counts of a key they spend too, sent up to a flush interval
// after the own counts held, may still be on their way, and a share read
// from the own counts held alone takes the whole headroom meanwhile (a
// cut of 1 s windows went to 1.205 of the limit; later in a run, with
// clocks 1 s apart and region voices, a cut went to 1.22 where it went to
// 1.18). Any other entry takes its own admits for unseen, which errs
// towards refusing. The caller holds sh.mu.
func (sh *shard) seedHot(s *Store, e *hotEntry, horizon int64, i int32, sl *slot) {
	var fp uint32
	hashed := false
	for k := sh.sentKeep; k < len(sh.sent); k++ {
		r := &sh.sent[k]
		if r.pos != i {
			continue
		}
		if !hashed {
			fp, hashed = sh.fingerprint(s, i, sl), true
		}
		if r.fp == fp {
			e.push(r.at, horizon, r.win, r.own)
		}
	}
}

// sameOwn reports whether slot sl's own counts are still those r recorded.
func sameOwn(sl *slot, r *sentRec) bool {
	switch d := sl.win - r.win; {
	case d == 0:
		return sl.own == r.own
	case d == 1:
		return sl.own[0] == r.own[1] && sl.own[1] == 0
	case d > 1:
		return sl.own == [2]uint64{}
	}
	return false
}

// hotOf returns slot i's hot entry, making one if it has none: nil when
// the shard's hot table is full and no entry can be evicted. A new entry
// lists the slot for the next flush, which records its first snapshot. The
// caller holds sh.mu.
func (sh *shard) hotOf(s *Store, i int32, sl *slot, now int64) *hotEntry {
	if sl.flags&flagHot != 0 {
		e := &sh.hotSlab[sh.hot[i]]
		e.used = now
		return e
	}
	if s.hotPerShard == 0 || (len(sh.hot) >= s.hotPerShard && !sh.evictHot()) {
		return nil
	}
	var k int32
	if n := len(sh.hotFree); n > 0 {
		k = sh.hotFree[n-1]
		sh.hotFree = sh.hotFree[:n-1]
	} else {
		k = int32(len(sh.hotSlab))
		sh.hotSlab = append(sh.hotSlab, hotEntry{})
	}
	// Its denials are counted whole from the slot's window on when it
	// denied nothing there yet, else from the next.
	from := sl.win
	if sl.mark&markDenied1 != 0 {
		from++
	}
	sh.hotSlab[k] = hotEntry{pos: i, used: now, dfrom: from}
	sh.hot[i] = k
	sl.flags |= flagHot
	sh.markDirty(i, sl, 0)
	return &sh.hotSlab[k]
}

// admitAllowance is what the near-limit allowance a does to an admitted
// request of slot i before it is counted (count) or not. Far from the
// limit the slot alone clears the request: this replica's own counts,
// unseen or not, within 1/Replicas of the headroom. Otherwise its share
// decides (decideSplit), which may deny it. A request still admitted and
// counted arms the slot's hot entry first (armHot). The caller holds sh.mu.
func (sh *shard) admitAllowance(s *Store, a *Allowance, i int32, sl *slot, now Now, elapsed int64, limit, cost uint64, count bool, r *window.Result) {
	if a.on() {
		s.noteBorn(now.Index*now.Width + now.Elapsed)
	}
	if own := satAdd(sl.own[0], sl.own[1]); own != 0 && a.on() &&
		float64(satAdd(own, cost))*float64(a.Replicas()) > float64(limit)-r.Estimate {
		sh.decideSplit(s, a, i, sl, now, elapsed, limit, cost, r)
	}
	if r.Allowed && count && sl.flags&(flagHot|flagRecent) == 0 && sl.dirty&dirtyOwn == 0 {
		sh.armHot(s, a, i, sl, now, limit, cost, r.Estimate)
	}
}

// armHot gives slot i, whose own counts every replica holds, a hot entry
// that says so before it counts an admit, when one of the admits a spare
// room may hold unseen after it will be split (see admitHashed): an entry
// made later, while the admit's flush is within a horizon, would not know
// which of the own counts were held before it, and would take them all
// for unseen (a key of a few admits long held, then a few within one lag,
// was refused far below its limit). A key never quiescent since its first
// admit (its admits follow each other within a lag) gets its entry at its
// first split, from the shard's records of its flushes (seedHot). The
// caller holds sh.mu.
func (sh *shard) armHot(s *Store, a *Allowance, i int32, sl *slot, now Now, limit, cost uint64, est float64) {
	own := satAdd(sl.own[0], sl.own[1])
	if own == 0 || !a.on() || float64(satAdd(own, (spareUnseenHalf+1)*cost))*float64(a.Replicas()) <= float64(limit)-est {
		return
	}
	t := now.Index*now.Width + now.Elapsed
	if e := sh.hotOf(s, i, sl, t); e != nil {
		e.held(sl.win, sl.own)
	}
}

// dropHot frees slot i's hot entry; the caller holds sh.mu.
func (sh *shard) dropHot(i int32, sl *slot) {
	k := sh.hot[i]
	delete(sh.hot, i)
	sh.hotSlab[k] = hotEntry{pos: -1}
	sh.hotFree = append(sh.hotFree, k)
	sl.flags &^= flagHot
}

// moveHot moves the hot entry of a slot from position from to to.
func (sh *shard) moveHot(from, to int32) {
	k := sh.hot[from]
	delete(sh.hot, from)
	sh.hot[to] = k
	sh.hotSlab[k].pos = to
}

// evictHot frees the least recently used of a sample of hot entries.
func (sh *shard) evictHot() bool {
	n := len(sh.hotSlab)
	best := int32(-1)
	for seen, looked := 0, 0; seen < hotSample && looked < n; looked++ {
		if sh.hotCur++; sh.hotCur >= n {
			sh.hotCur = 0
		}
		e := &sh.hotSlab[sh.hotCur]
		if e.pos < 0 {
			continue
		}
		seen++
		if best < 0 || e.used < sh.hotSlab[best].used {
			best = int32(sh.hotCur)
		}
	}
	if best < 0 {
		return false
	}
	pos := sh.hotSlab[best].pos
	sh.dropHot(pos, &sh.slots[pos])
	return true
}

// split decides, for slot i whose estimate est lets a request of cost in,
// whether this replica's share of the headroom does too (see the top of
// this file). now is the decision's time, f the elapsed fraction of the
// window. It returns the time until a denied request may fit. The caller
// holds sh.mu.
func (sh *shard) split(s *Store, a *Allowance, i int32, sl *slot, now, elapsed, width int64, f, est float64, limit, cost uint64) (bool, int64) {
	e := sh.hotOf(s, i, sl, now)
	var s0, s1 uint64
	switch {
	case sl.dirty&dirtyOwn == 0 && sl.flags&flagRecent == 0:
		// Sent longer than a horizon ago, and nothing since: all held.
		s0, s1 = sl.own[0], sl.own[1]
		if e != nil {
			e.held(sl.win, sl.own)
		}
	case e != nil:
		if e.n == 0 && s.decidedFor(now, a.Horizon) < max(coldLags*a.Horizon, width) && sh.spentHere(s, a, i, sl, 1) {
			// A key spent at one PoP in the store's first window (see seedHot).
			sh.seedHot(s, e, a.Horizon, i, sl)
		}
		if last := s.lastFlush.Load(); sl.dirty&dirtyOwn == 0 && last != 0 {
			e.push(last, a.Horizon, sl.win, sl.own) // sent by the last flush at the latest
		}
		s0, s1 = e.seen(now, a.Horizon, sl.win)
	}
	u0, u1 := satSub(sl.own[0], s0), satSub(sl.own[1], s1)
	unseen := satAdd(u0, u1)
	k := est - (float64(u0)*(1-f) + float64(u1))
	// The trailing rate: k over the time it was gathered in (rateSpan; a
	// window once this store has decided for one), hw a horizon over it.
	age := s.decidedFor(now, a.Horizon)
	span := rateSpan(age, a.Horizon, width)
	hw := float64(a.Horizon) / float64(span)
	rushed := span < width && rushing(k, float64(limit), hw)
	// Crowded: a key spent past half its limit, with less headroom than
	// the fleet has replicas, in a fleet whose replicas holding one
	// request each would pass a tenth of the limit and what the fleet
	// admits in a lag at the limit's rate. Every replica holding
	// its one request in flight would then add up to more than the
	// headroom: one request per replica, each time the sliding estimate
	// frees a little room, kept a running fleet that many requests over
	// its limit (300 nodes, 18 % over on a limit of 1 000). Such a key's
	// one request in flight is given at a replica's turn, as in a rushing
	// fleet, when its share of the headroom is below one request. A
	// smaller fleet keeps its one request each: within a tenth of the
	// limit, or within a lag's admits, the turns' draws cost more admits
	// than they save, and the draws of fewer than minCrowd replicas add
	// up to the headroom too loosely (a five-node fleet on 1 s windows
	// went 2 % further over its limit with them).
	n := float64(a.Replicas()) * float64(cost)
	crowded := !rushed && a.Replicas() >= minCrowd && k*2 >= float64(limit) && float64(limit)-k < n &&
		n*10 > float64(limit) && n > float64(limit)*2*hw
	if unseen == 0 && !rushed && !crowded {
		return true, 0 // one request in flight is always allowed
	}
	if unseen != 0 {
		u := float64(satAdd(unseen, cost))
		n := 1.0 // replicas that may hold as much unseen as this one
		if span < width && age < 2*a.Horizon {
			n = sh.sources(s, a, i, sl)
		}
		if spare(k, u, n, float64(limit), hw) {
			return true, 0
		}
		if age < coldLags*a.Horizon && localSpare(k, u, n, float64(limit), hw) && sh.spentHere(s, a, i, sl, n) {
			return true, 0
		}
		if e != nil && secondInFlight(k, u, n, float64(limit), hw, now-e.denied > 2*a.Horizon) {
			return true, 0
		}
	}
	// The members' counts, and those of excluded replicas, by window.
	var m, x [2]uint64
	if sl.flags&flagSide != 0 {
		ex := s.excluded.Load()
		for _, se := range sh.side.get(i) {
			j := se.win(sl.win) - (sl.win - 1)
			if j != 0 && j != 1 {
				continue
			}
			switch {
			case se.member():
				m[j] = satAdd(m[j], se.count)
			case ex != nil && ex.has(se.rep()):
				x[j] = satAdd(x[j], se.count)
			}
		}
	}
	w := a.floor(sl, m[0], x[0], elapsed)
	if kw, mine := k-(float64(x[0])*(1-f)+float64(x[1])), float64(s0)*(1-f)+float64(s1); kw > 0 && mine > w*kw {
		w = mine / kw
	}
	room := float64(limit) - k
	if rushed {
		room /= rushedParts // the rest may be in flight (see rushing)
	}
	share := w * room
	if calm := e != nil && now-e.denied > 2*a.Horizon; calm && span >= width && !rushed && !crowded && s.excluded.Load() == nil {
		// What the fleet holds unseen on average: its admits in a
		// horizon and half a flush interval.
		fleet := k * (hw + float64(s.flushGap.Load())/2/float64(span))
		share += pooledRoom(w, room, fleet, float64(satAdd(unseen, cost)), float64(limit))
	}
	if !rushed && k*2 >= float64(limit) {
		share *= a.paced(s)
	}
	if float64(satAdd(unseen, cost)) <= share {
		return true, 0
	}
	if unseen == 0 {
		// Rushed or crowded, with a share below the request: a turn (see
		// turn).
		p := share / float64(cost)
		if crowded {
			// A turn is drawn for a horizon-long period, and a replica
			// with no request of the key in its period loses it: turns
			// drawn at the share alone admitted 0.954 of a central
			// limiter's admits on 300 PoPs (see crowdedDraw).
			p *= min(crowdedDraw(e, sl, f, float64(a.Horizon)/float64(width)), crowdedTurns+pooledPart*float64(limit)/room)
			// (Past crowdedTurns, the turns of all replicas together add
			// at most pooledPart of the limit, as pooling does: a surge
			// cashes them all at once.)
		}
		if turn(s.hashBytes(sl.rule, sh.keyBytes(i)), now, a.Horizon, p) {
			return true, 0
		}
		return false, max(a.Horizon-now%a.Horizon, 1)
	}
	if e == nil {
		return false, a.Horizon
	}
	return false, max(e.matures(now, a.Horizon), 1)
}

// pooledRoom returns how much a calm replica may hold unseen beyond its
// share w x room of the headroom: fleet is what the whole fleet holds
// unseen on average (its trailing rate times the time an admit stays
// unseen: a horizon and half a flush interval), u what this replica would
// hold with the request.
//
// The split makes every replica keep its unseen admits within its share at
// every instant. But arrivals are random: at a mild overload a replica's
// unseen admits, w x fleet on average, are now and then twice that while
// the others hold less than theirs, and each replica refusing at its own
// peaks kept the fleet's headroom well above what it held in flight (a key
// at 1.1 times its limit of 1 000 per 10 s over 20 PoPs of two nodes, with
// region voices, admitted 0.96 of a central limiter's admits; 0.86 with
// 1 s windows). So the headroom the fleet's average leaves, room - fleet,
// is pooled: a replica whose u is within the spread of a Poisson count of
// its mean (two standard deviations and one request) may use its
// (1 - w) part of it, up to pooledPart x w x limit. Past that spread a
// replica sees not random arrivals but a surge (a key jumping from 0.95
// to 5 times its limit everywhere at once went to 1.29 of it with neither
// the spread nor pooledPart bounding it). Only a calm replica pools (split): one that refused
// the key within two horizons is held to its share, as every replica of a
// key under attack is, where what is in flight is the shares, not the rate
// (pooling at every replica took a key at 4 times its limit to 1.18).
// Neither does a replica in a cut (the trailing rate holds the other
// side's frozen counts) or in its first window (no trailing rate yet).
func pooledRoom(w, room, fleet, u, limit float64) float64 {
	if room <= fleet {
		return 0
	}
	mine := w * fleet
	if u > mine+2*math.Sqrt(mine)+1 {
		return 0
	}
	return min((1-w)*(room-fleet), pooledPart*w*limit)
}

// pooledPart bounds what pooling adds over the whole fleet, however the
// replicas' peaks line up (a surge, a window's start, clocks apart): each
// replica's pooled room is at most pooledPart x w x limit. At a tenth, a
// cut of 1 s windows with clocks half a second apart, before the sides
// noticed it, went to 1.21 of its limit (1.17 without pooling).
const pooledPart = 0.05

// rushedParts is how many parts of the headroom a rushing fleet counts
// with: the turns are drawn per horizon-long period and a lag is about two
// horizons, so the admits of the two periods before are in flight when a
// replica draws in a third (see the cold start).
const rushedParts = 3

// crowdedDraw returns how many times its share of the headroom a replica
// draws its turn of a crowded key with: one over twice the chance that it
// has a request of the key in a horizon-long period, at least crowdedTurns
// and at most maxCrowdedTurns. The turns the fleet takes in a period then
// add up to about half its share of the headroom whatever each replica's
// rate (a lag is about two periods, and what the period before took may
// still be in flight), and to about all of it where the replicas have a
// request in half the periods or more, as over 300 PoPs. That chance
// follows the replica's demand of the key over the trailing window (its
// admits and what its hot entry e counted denied; hw is a horizon over the
// window). Spread over 54 replicas, a key at 1.1 times its limit of 300 per
// 10 s has a request at each in about one period in eight, and turns
// drawn at twice the share kept the fleet 8 % under its limit (0.955 of a
// central limiter's admits). But a key that surges everywhere at once
// finds every replica with a request, and cashes every turn: split
// bounds the turns past crowdedTurns so that all replicas' together add
// at most pooledPart of the limit (the key at 0.95 of its limit over 80
// replicas, surging to 5 times it for a second, went to 1.06-1.07 of its
// limit unbounded; 1.02-1.03 at twice the share, 1.03-1.04 bounded;
// 0.968-0.973 of central on the 54 replicas above). Without a count of
// its denials a replica draws at crowdedTurns.
func crowdedDraw(e *hotEntry, sl *slot, f, hw float64) float64 {
	if e == nil {
		return crowdedTurns
	}
	d1, ok := e.deniedIn(sl.win)
	if !ok {
		return crowdedTurns
	}
	var demand, part float64
	if d0, ok := e.deniedIn(sl.win - 1); ok {
		demand = float64(satAdd(sl.own[0], d0))*(1-f) + float64(satAdd(sl.own[1], d1))
		part = 1
	} else {
		demand, part = float64(satAdd(sl.own[1], d1)), f
	}
	if part < minDrawPart || demand <= 0 {
		return crowdedTurns
	}
	chance := -math.Expm1(-demand / part * hw) // of a request in a period
	return min(max(1/(2*chance), crowdedTurns), maxCrowdedTurns)
}

// maxCrowdedTurns bounds crowdedDraw, and minDrawPart is the least part of
// a window its demand is read over.
const (
	maxCrowdedTurns = 16
	minDrawPart     = 0.2
)

// minCrowd is the fewest replicas whose one request each a crowded key
// gives at their turns, and crowdedTurns how many times its share of the
// headroom a replica draws its turn with (see split).
const (
	minCrowd     = 16
	crowdedTurns = 2
)

// spareUnseen is how many requests a replica may hold unseen, beyond its
// share of the headroom, while the headroom is well above what the fleet
// admits in a replication lag (spare); spareUnseenHalf how many while the
// key stays within half its limit.
const (
	spareUnseen     = 3
	spareUnseenHalf = 5
)

// spare reports whether a replica whose unseen admits with the request add
// up to u may admit it although its share of the headroom does not hold u:
// u is at most spareUnseen, and the key stays within three quarters of its
// limit with n x u (n replicas, this one included, that may hold as much
// unseen: see sources) and three times what the whole fleet admits in a
// lag at the key's trailing rate (k per span, see rateSpan; a lag is about
// two horizons, hw being a horizon over the span); or u is at most
// spareUnseenHalf and the key stays so within half its limit. Arrivals are random: a replica whose share
// of a key's traffic is a request per lag or less now and then sees a
// second or third one within a lag, while the others, at the same rate,
// hold next to nothing unseen; with its share of the headroom below one
// request it would refuse a key far from its limit. Over many keys a
// fourth and a fifth one bunch up too, most often in a key's first lag,
// before its first counts are held (a new client's first requests; every
// key at a cold start), when the split knows nothing of where the key's
// traffic goes and gives each replica an equal part of the headroom:
// within half its limit a key has room for them. Nearer the limit the
// split decides alone. A key that surges everywhere at once from below
// three quarters of its limit may take the fleet to 3/4 x limit +
// spareUnseen x replicas in the first lag, from below half of it to
// limit/2 + spareUnseenHalf x replicas, before the others' counts arrive;
// past that, the trailing rate and the count close the spare room. At a
// cold start the others' first counts say more (see the cold start in
// allowance_cold.go).
func spare(k, u, n, limit, hw float64) bool {
	fleet := k + n*u + 3*k*2*hw
	return u <= spareUnseen && 4*fleet <= 3*limit || u <= spareUnseenHalf && 2*fleet <= limit
}

// secondInFlight reports whether a replica near the limit may hold u
// unseen although its share of the headroom does not hold u: u is at most
// two (one more than the request always allowed), the replica refused the
// key not within two horizons (calm), and the headroom covers n x u (as in
// spare) plus one and a half times what the fleet admits in a lag at the
// key's trailing rate (k per span; hw a horizon over the span). At a mild overload a
// replica whose share of the headroom is a request or two often sees a
// second request within a lag while the others hold about what the rate
// says; a replica under attack refuses the key all the time and is held to
// its share. A key that surges at once everywhere while no replica was
// refusing it may go over by up to two requests per replica in the first
// lag, not one; once they refuse, by one.
func secondInFlight(k, u, n, limit, hw float64, calm bool) bool {
	return calm && u <= 2 && n*u+1.5*k*2*hw <= limit-k
}

// decideSplit turns r, a request the estimate lets in, into a denial when
// this replica's share of the headroom does not (split). It is kept out of
// Admit's body, which keys far from their limit run. The caller holds sh.mu.
func (sh *shard) decideSplit(s *Store, a *Allowance, i int32, sl *slot, now Now, elapsed int64, limit, cost uint64, r *window.Result) {
	t := now.Index*now.Width + now.Elapsed
	ok, retry := sh.split(s, a, i, sl, t, elapsed, now.Width, fraction(elapsed, now.Width), r.Estimate, limit, cost)
	if ok {
		return
	}
	// Denied: nothing counted, so the reset leaves this request out.
	r.Allowed, r.RetryAfter, r.Remaining = false, retry, 0
	r.Reset = now.Width - elapsed
	if satAdd(sl.own[1], sl.other[1]) > 0 {
		r.Reset += now.Width
	}
}

// pace returns what a replica scales its share of the headroom by, its
// horizon being shorter than the fleet's slowest (Reach), gap being its
// flush interval: the time an admit stays unseen here over that at the
// slowest, each a horizon and half a flush interval on average. A
// replica's unseen admits are held after that time, which frees its share
// again: at the limit a replica admits about its share per such a time,
// and a node alone in its PoP (which publishes its own counts, where a
// PoP's members reach the others through its publisher a flush slot
// later) admitted twice as much as each of a PoP of three beside it took
// per node's share, on even demand (a one-node PoP 0.67 of the admits,
// a three-node PoP 0.33).
func (a *Allowance) pace(gap int64) float64 {
	if a.Reach <= a.Horizon {
		return 1
	}
	half := float64(gap) / 2
	return (half + float64(a.Horizon)) / (half + float64(a.Reach))
}

// paced is pace at s's flush interval; the caller has checked a.on().
func (a *Allowance) paced(s *Store) float64 {
	if a.Reach <= a.Horizon {
		return 1
	}
	return a.pace(s.flushGap.Load())
}

// floor returns the least share of slot sl's key for this replica: its part
// of the previous window's counts, in two levels as the counts travel (its
// PoP's part, then its part of the PoP's, each at least an equal split),
// once every replica holds that window whole; before, or with no count in
// it, an equal split. m0 and x0 are the previous window's counts of the
// members and of the excluded replicas, elapsed the time into the current
// window.
func (a *Allowance) floor(sl *slot, m0, x0 uint64, elapsed int64) float64 {
	ps, ns := 1/float64(max(a.PoPs, 1)), 1/float64(max(a.Members, 1))
	// A count of the previous window was raised before it ended: the
	// others hold it a flush interval (at most a horizon) and a horizon
	// later.
	if elapsed < 2*a.Horizon {
		return ps * ns
	}
	pop := float64(satAdd(sl.own[0], m0))
	all := float64(satAdd(sl.own[0], satSub(sl.other[0], x0)))
	if pop > 0 && all > 0 {
		ps = max(ps, min(pop/all, 1))
		ns = max(ns, float64(sl.own[0])/pop)
	}
	return ps * ns
}

// AdmitSplit is Admit with the near-limit allowance a (nil: none): a request
// the estimate lets in is admitted only if this replica's unseen admits stay
// within its share of the headroom.
func (s *Store) AdmitSplit(rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) AdmitResult {
	return s.admit(rule, key, now, limit, cost, count, a)
}

// SetExcluded sets which replicas' counts the allowance leaves out of every
// replica's share (the PoPs counted as partitioned, whose counts are
// frozen); nil leaves none out.
func (s *Store) SetExcluded(excluded func(identity.Replica) bool) {
	s.repMu.Lock()
	defer s.repMu.Unlock()
	s.exclude = excluded
	if excluded == nil {
		s.excluded.Store(nil)
		return
	}
	set := &memberSet{w: make([]atomic.Uint64, (len(s.reps)+63)/64)}
	for id, r := range s.reps {
		if r != (identity.Replica{}) && excluded(r) {
			set.w[id>>6].Or(1 << (id & 63))
		}
	}
	s.excluded.Store(set)
}

func (m *memberSet) has(id ReplicaID) bool {
	i := int(id >> 6)
	return i < len(m.w) && m.w[i].Load()&(1<<(id&63)) != 0
}

func satSub(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// fraction returns the elapsed fraction of now's window, clamped to [0, 1].
func fraction(elapsed, width int64) float64 {
	return min(max(float64(elapsed)/float64(width), 0), 1)
}
