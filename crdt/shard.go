package crdt

import (
	"sync"
	"sync/atomic"
)

// shard is an open-addressing hash table whose buckets are the slots
// themselves (table.go). A decision hashes the key once and usually finds it
// in the first slot it reads: one cache line.
//
// Slot positions move when the table grows or shrinks and when a deletion
// shifts a probe run back; the side structures keyed by position (remote
// replicas' entries, hot keys) move with them, and a moved slot still marked dirty is
// listed again at its new position.
type shard struct {
	// The first two cache lines hold what a look-up and a merge read:
	// PrefetchShard prefetches both, and PrefetchSlot loads base, n and
	// sideBase from the first (the line that holds the lock and the table
	// too), ahead of the merge that uses them.
	mu sync.Mutex
	// base and n are the table's address and length, written under mu
	// with slots and read without it by Prefetch: a stale pair only
	// prefetches the wrong line.
	base atomic.Uintptr
	n    atomic.Int64
	// sideBase is where side.lists is, for the same prefetch; 0 for none.
	sideBase atomic.Uintptr
	slots    []slot // the table; live slots have flagLive
	// work is set while dirty or sent may hold something (noteWork), so
	// that Flush and Pending pass a shard with nothing to do without
	// locking it: a node of many shards and few changing keys flushes in
	// time of the keys, not of the shards.
	work atomic.Bool
	// budgeted is maxBytes > 0, kept here (in what work leaves of the
	// first line) so that a merge that adds a remote count to a store
	// without a byte budget reads no line of the shard beyond the first two.
	budgeted bool

	side  sideTable
	arena []byte // the long keys (table.go)
	used  int

	mapped *offHeap // slots' mapping outside the heap, or nil (offheap.go)
	// arenaDead is how many bytes of arena removed keys left.
	arenaDead int
	dirty     []int32
	now       []int64 // by RuleID: the latest window index seen
	count     []int   // by RuleID: live keys
	cap       int     // the most live keys: the shard's part of MaxKeys
	maxBytes  int     // the shard's part of MaxBytes; 0 for none (budget.go)
	cur       int     // eviction cursor
	// agg is, by RuleID, the one counter of the rule's keys that found no
	// room (see evict.go).
	agg []aggregate
	// sketches is, by RuleID, the counts of the rule's evicted keys (see
	// sketch.go), nil until the rule's first eviction; sketchBytes their size.
	sketches    []*sketch
	sketchBytes int
	// hot maps the position of a slot with flagHot to its entry in
	// hotSlab; hotFree lists free entries, hotCur is hot eviction's cursor.
	hot     map[int32]int32
	hotSlab []hotEntry
	hotFree []int32
	hotCur  int
	// sent lists, oldest first from sentHead, the flushes that sent own
	// counts; once older than the horizon they clear flagRecent. Those
	// from sentKeep to sentHead are past it, kept for a second horizon for
	// the hot entries made meanwhile (seedHot).
	sent               []sentRec
	sentKeep, sentHead int
	// asked is, by RuleID, the cost this replica was asked of the rule's
	// keys in its latest two windows, for the rules counted so (asked.go).
	asked []askedAcc
	// Pads the shard to whole cache lines on 64-bit machines (432 bytes
	// of fields), with a spare line between neighbours' hot lines.
	_ [16 + 64]byte
}

// noteWork marks the shard as having work for Flush; the caller holds sh.mu
// and has just listed something in dirty or sent.
func (sh *shard) noteWork() {
	if !sh.work.Load() {
		sh.work.Store(true)
	}
}

func (s *Store) shardOf(h uint64) *shard { return &s.shards[h>>s.shardShift&uint64(len(s.shards)-1)] }

// roll advances slot i to window target > sl.win; the caller holds sh.mu.
func (sh *shard) roll(i int32, sl *slot, target int64) {
	if target > sh.now[sl.rule] {
		sh.now[sl.rule] = target
	}
	if target == sl.win+1 {
		sl.own[0], sl.own[1] = sl.own[1], 0
		sl.other[0], sl.other[1] = sl.other[1], 0
	} else {
		sl.own = [2]uint64{}
		sl.other = [2]uint64{}
	}
	sl.dirty = shiftDirty(sl.dirty, target-sl.win)
	sl.mark = shiftMark(sl.mark, target-sl.win)
	prev := sl.win // the entries lie within one window of it
	sl.win = target
	if sl.flags&flagSide == 0 {
		return
	}
	old := sh.side.get(i)
	// other[0] now holds what other[1] held: the remote entries of window
	// prev and a floor no entry accounts for (a returning key's estimate,
	// sketch.go), which is kept.
	floor := sl.other[0]
	for _, e := range old {
		if e.win(prev) == prev && target == prev+1 {
			floor -= min(floor, e.count)
		}
	}
	sl.other = [2]uint64{floor, 0}
	sh.keepLive(i, sl, old, prev, target)
}

// keepLive keeps of slot i's remote entries old (their windows numbered
// from prev) those of windows target-1 to target+1, adds those of target-1
// and target to sl.other, and drops the others (and the list, when none is
// left). The caller holds sh.mu.
func (sh *shard) keepLive(i int32, sl *slot, old []sideEntry, prev, target int64) {
	es := old[:0]
	for _, e := range old {
		w := e.win(prev)
		if w < target-1 || w > target+1 {
			continue
		}
		es = append(es, e)
		if k := w - (target - 1); k == 0 || k == 1 {
			sl.other[k] = satAdd(sl.other[k], e.count)
		}
	}
	if len(es) == 0 {
		sh.side.del(i)
		sl.flags &^= flagSide
		return
	}
	sh.setSide(i, es)
}

// rebase moves slot i back to window target < sl.win: the clock stepped
// back (steppedBack; a node's time stepped back, to the clock its fleet
// agreed or by a clock step). Both of the slot's windows then lie wholly
// ahead of now, where the other replicas refuse this replica's counts as
// ahead and this one refuses theirs as stale until its clock catches up:
// each would count alone. The own counts of those windows were admitted at
// most the step ago, so they are counted again in the target window (the
// entries already sent stay where they were: a G-counter is only ever
// raised, and counting them twice errs towards refusing); the remote
// entries outside the target's live windows are dropped as a roll drops
// them, and so is the key's hot entry. The caller holds sh.mu.
func (sh *shard) rebase(i int32, sl *slot, target int64) {
	own := satAdd(sl.own[0], sl.own[1])
	if sl.flags&flagHot != 0 {
		sh.dropHot(i, sl)
	}
	prev := sl.win
	sl.win = target
	sh.now[sl.rule] = min(sh.now[sl.rule], target) // eviction: the slot is live
	sl.own = [2]uint64{0, own}
	sl.other = [2]uint64{}
	sl.mark = markAEChanged // re-laid: sent again
	if sl.flags&flagSide != 0 {
		sh.keepLive(i, sl, sh.side.get(i), prev, target)
	}
	sl.dirty &^= dirtyAll
	if own > 0 {
		sh.markDirty(i, sl, dirtyOwn1|dirtyPoP1)
	}
}

// steppedBack reports whether now lies so far before slot sl's window that
// its clock stepped back rather than raced: more than a window back, or a
// window back by more than an eighth of a window before sl's window starts.
// A decision that read the clock just before another rolled the key reaches
// the slot a moment behind its window (decided at its start, as
// shard.rebase says); a clock stepped back by a window or more, as a fleet
// clock correction of a whole 1 s window does, lands anywhere in the window
// before, and counting on in the slot's window would leave this replica's
// counts where the other replicas do not reach for up to that window
// (they take an entry a window ahead of theirs as ahead, not as now).
func steppedBack(sl *slot, now Now) bool {
	return now.Index < sl.win-1 || now.Index == sl.win-1 && now.Width-now.Elapsed > now.Width/8
}

// markDirty sets bits of slot i's dirty marks and lists the slot for Flush;
// the caller holds sh.mu.
func (sh *shard) markDirty(i int32, sl *slot, bits uint8) {
	sl.dirty |= bits
	sl.mark |= markAEChanged
	if sl.flags&flagInDirty == 0 {
		sl.flags |= flagInDirty
		sh.dirty = append(sh.dirty, i)
		sh.noteWork()
	}
}

// expired reports whether slot i holds nothing live at window nowIndex of
// its rule: its windows are all before nowIndex-1, including the window
// after its own, which a remote replica whose clock runs ahead may have
// counted in. The caller holds sh.mu.
func (sh *shard) expired(i int32, sl *slot, nowIndex int64) bool {
	switch {
	case sl.win >= nowIndex-1:
		return false
	case sl.win+1 < nowIndex-1 || sl.flags&flagSide == 0:
		return true
	}
	for _, e := range sh.side.get(i) {
		if e.win(sl.win) > sl.win {
			return false
		}
	}
	return true
}

// popTotals returns the PoP totals of windows win-1, win and win+1 of slot i:
// the own count plus the members' counts. The caller holds sh.mu.
func (sh *shard) popTotals(i int32, sl *slot) [3]uint64 {
	t := [3]uint64{sl.own[0], sl.own[1], 0}
	if sl.flags&flagSide == 0 {
		return t
	}
	for _, e := range sh.side.get(i) {
		if !e.member() {
			continue
		}
		if k := e.win(sl.win) - (sl.win - 1); k >= 0 && k < 3 {
			t[k] = satAdd(t[k], e.count)
		}
	}
	return t
}
