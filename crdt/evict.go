package crdt

import (
	"math"
	"slices"

	"github.com/geolimit/geolimit/window"
)

// Room for keys.
//
// A shard holds at most its part of MaxKeys. Inside a shard every rule known
// to the store (SetProtect) is guaranteed an equal share of that room,
// cap/rules (at least one key), and may borrow free room beyond its share.
// When the shard is full, a new key of rule R takes, in this order, the
// place of:
//
//  1. an expired key of any rule;
//  2. when R holds less than its share (R is owed room): a key of a rule
//     holding more than its share (a borrower), the keys not being limited
//     first, then the coldest of those being limited: borrowed room is lost
//     first, even by the keys it holds that are being limited;
//  3. otherwise: the coldest key not being limited of R itself or of a
//     borrower. The room of a rule within its share is never taken.
//
// A key is being limited when its count over its live windows is at or
// above its rule's protection threshold (SetProtect), or when a request of
// it was denied in one of its live windows (slot.mark). The candidates are
// the first evictSample eligible keys among at most evictScan live slots
// from a cursor that walks the table, so the choice is a function of the
// store's state (and of StoreConfig.Seed) alone.
//
// A key that finds no room is not stored. Admit decides it with the rule's
// aggregate in the shard: one windowed counter (like a key's) that all the
// rule's keys without room in the shard share, with the rule's limit.
// Whatever a flood of keys does to a rule, one key is never admitted more
// than the rule's limit per window, and a flooded rule's keys without room
// together at most limit x shards; the keys with room, and the other rules
// within their share, are not affected. A key evicted while being limited
// leaves its counts in its rule's aggregate, so it cannot start afresh by
// coming back without room. The aggregate is the node's own: it is not
// replicated (its counts are no key's) and it errs towards denying, for the
// rule's keys without room only, while the node is flooded.

// evictSample is how many eligible keys a full shard compares to make room;
// evictScan is how many live slots it looks at, at most.
const (
	evictSample = 16
	evictScan   = 64
)

// Bits of slot.mark: a request was denied in window win-1, in window win;
// and for anti-entropy (walk.go), the key's PoP total or own counts, or its
// region total, changed since the slot's last anti-entropy walk (...0), in
// the period before it (...1), in the one before that (...2).
const (
	markDenied0 uint8 = 1 << iota
	markDenied1
	markAEPoP0
	markAEPoP1
	markAEPoP2
	markAERegion0
	markAERegion1
	markAERegion2

	markDenied   = markDenied0 | markDenied1
	markAEPoP    = markAEPoP0 | markAEPoP1 | markAEPoP2
	markAERegion = markAERegion0 | markAERegion1 | markAERegion2
	// markAEChanged is what a change of the own counts or the PoP total
	// marks: both totals changed.
	markAEChanged = markAEPoP0 | markAERegion0
)

// shiftMark returns slot marks moved on by d > 0 windows: the denials move
// with their windows, the anti-entropy marks stay (they are the key's).
func shiftMark(mark uint8, d int64) uint8 {
	if d >= 2 {
		return mark &^ markDenied
	}
	return (mark&markDenied)>>1 | mark&^markDenied
}

// ruleTable is what eviction knows of the rules: their protection
// thresholds and how many there are. Replaced, never changed in place.
type ruleTable struct {
	protect []uint64 // by RuleID
	known   []bool   // by RuleID: set by SetProtect
	keep    []bool   // by RuleID: set by SetKeepSpent
	ask     []uint64 // by RuleID: set by SetCountAsked (askCap)
	n       int      // rules known
}

// keepsSpent reports whether rule's keys must never restart below what
// they spent (SetKeepSpent).
func (t *ruleTable) keepsSpent(rule RuleID) bool { return int(rule) < len(t.keep) && t.keep[rule] }

// SetKeepSpent sets whether a key of rule evicted and back must restart
// from everything its sketch cells hold, never from less than it spent:
// for a rule whose windows are long (a monthly quota), where a key that
// gained even one request per eviction could spend far beyond its limit.
// The cost is the other way: past the store's room, a key new to the store
// starts from its cells in full, which a flood of new keys raises, so it
// may be denied early (see sketch.go). By default a key that finds no cell
// of its own starts from at most two below its protection threshold.
func (s *Store) SetKeepSpent(rule RuleID, keep bool) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := s.rules.Load()
	t := &ruleTable{protect: old.protect, known: old.known, keep: slices.Clone(old.keep), ask: old.ask, n: old.n}
	if int(rule) >= len(t.keep) {
		t.keep = append(t.keep, make([]bool, int(rule)+1-len(t.keep))...)
	}
	t.keep[rule] = keep
	s.rules.Store(t)
}

func (t *ruleTable) protectOf(rule RuleID) uint64 {
	if int(rule) < len(t.protect) {
		return t.protect[rule]
	}
	return 0
}

// share is the room of a shard of cap keys guaranteed to each rule.
func (t *ruleTable) share(cap int) int { return max(cap/max(t.n, 1), 1) }

// SetProtect sets the count, over a key's live windows, at or above which a
// key of rule is being limited: it keeps its place when another key needs
// room (unless it holds borrowed room, see evict.go). With the default, 0,
// every key of the rule is. It also makes the rule known to the store: the
// room of each shard is shared equally by the known rules.
func (s *Store) SetProtect(rule RuleID, threshold uint64) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := s.rules.Load()
	t := &ruleTable{protect: slices.Clone(old.protect), known: slices.Clone(old.known), keep: old.keep, ask: old.ask, n: old.n}
	if int(rule) >= len(t.protect) {
		t.protect = append(t.protect, make([]uint64, int(rule)+1-len(t.protect))...)
		t.known = append(t.known, make([]bool, int(rule)+1-len(t.known))...)
	}
	t.protect[rule] = threshold
	if !t.known[rule] {
		t.known[rule] = true
		t.n++
	}
	s.rules.Store(t)
}

// forgetRule undoes SetProtect for a dropped rule.
func (s *Store) forgetRule(rule RuleID) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := s.rules.Load()
	if int(rule) >= len(old.known) || !old.known[rule] {
		return
	}
	t := &ruleTable{protect: slices.Clone(old.protect), known: slices.Clone(old.known), keep: slices.Clone(old.keep),
		ask: slices.Clone(old.ask), n: old.n - 1}
	t.protect[rule], t.known[rule] = 0, false
	if int(rule) < len(t.keep) {
		t.keep[rule] = false
	}
	if int(rule) < len(t.ask) {
		t.ask[rule] = 0
	}
	s.rules.Store(t)
}

// limited reports whether slot sl's key is being limited.
func (t *ruleTable) limited(sl *slot) bool {
	return sl.mark&markDenied != 0 || sl.total() >= t.protectOf(sl.rule)
}

// evictFor frees one slot for a new key of rule, or reports that none may
// be freed; the caller holds sh.mu and sh.count covers rule.
func (sh *shard) evictFor(s *Store, rule RuleID) bool {
	t := s.rules.Load()
	share := t.share(sh.cap)
	owed := sh.count[rule] < share
	n := len(sh.slots)
	best, bestRank := int32(-1), uint64(math.MaxUint64)
	for seen, live, looked := 0, 0, 0; seen < evictSample && live < evictScan && looked < n; looked++ {
		if sh.cur++; sh.cur >= n {
			sh.cur = 0
		}
		i := int32(sh.cur)
		sl := &sh.slots[i]
		if sl.flags&flagLive == 0 {
			continue
		}
		live++
		if sh.expired(i, sl, sh.now[sl.rule]) {
			sh.remove(s, i)
			s.expired.Add(1)
			return true
		}
		// rank: the lower the better; the top bits order the classes,
		// the rest is the key's count (the colder the better).
		borrower := sh.count[sl.rule] > share
		limited := t.limited(sl)
		var class uint64
		switch {
		case owed && borrower && !limited:
			class = 0
		case owed && borrower:
			class = 2
		case !limited && (borrower || sl.rule == rule):
			class = 1
		default:
			continue
		}
		seen++
		if r := class<<62 | min(sl.total(), 1<<62-1); r < bestRank {
			best, bestRank = i, r
		}
	}
	if best < 0 {
		return false
	}
	sl := &sh.slots[best]
	if bestRank>>62 == 2 {
		sh.aggregateOf(sl.rule).fold(sl)
	}
	sh.forget(s, best, sl)
	sh.remove(s, best)
	s.evicted.Add(1)
	return true
}

// aggregate is the windowed count of a rule's keys that found no room in a
// shard: c[0] of window win-1, c[1] of window win.
type aggregate struct {
	win int64
	c   [2]uint64
	// tat is the one TAT of a paced rule's keys without room (pace.go).
	tat int64
}

// roll moves a on to window w, if later.
func (a *aggregate) roll(w int64) {
	switch d := w - a.win; {
	case d <= 0:
		return
	case d == 1:
		a.c = [2]uint64{a.c[1], 0}
	default:
		a.c = [2]uint64{}
	}
	a.win = w
}

// fold adds the counts of slot sl, an evicted key, to a.
func (a *aggregate) fold(sl *slot) {
	a.add(sl.win, [2]uint64{satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1])})
}

// aggregateOf returns rule's aggregate; the caller holds sh.mu.
func (sh *shard) aggregateOf(rule RuleID) *aggregate {
	if int(rule) >= len(sh.agg) {
		sh.agg = append(sh.agg, make([]aggregate, int(rule)+1-len(sh.agg))...)
	}
	return &sh.agg[rule]
}

// admitUntracked decides a request of cost of key h of rule that found no
// room, with the rule's aggregate and with the key's estimate in the rule's
// sketch, and with count counts it in both when admitted. The caller holds
// sh.mu.
func (sh *shard) admitUntracked(s *Store, h uint64, rule RuleID, now Now, limit, cost uint64, count bool) window.Result {
	a := sh.aggregateOf(rule)
	a.roll(now.Index)
	elapsed := now.Elapsed
	if now.Index < a.win {
		elapsed = 0
	}
	r := window.Decide(limit, cost, a.c[0], a.c[1], elapsed, now.Width)
	if k := sh.sketchOf(rule); k != nil && r.Allowed {
		est := k.estimate(h, now.Index)
		if kr := window.Decide(limit, cost, est[0], est[1], elapsed, now.Width); !kr.Allowed {
			r = kr
		}
	}
	switch {
	case !count:
	case r.Allowed:
		a.c[1] = satAdd(a.c[1], cost)
		sh.sketchFor(s, rule).add(h, now.Index, [2]uint64{0, cost})
	default:
		s.untrackedDenied.Add(1)
	}
	return r
}
