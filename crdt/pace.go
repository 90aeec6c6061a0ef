package crdt

import "github.com/geolimit/geolimit/window"

// Paced keys (the generic cell rate algorithm, package gcra).
//
// A rule decided by Pace keeps one number per key, its theoretical arrival
// time (TAT), in the key's slot: the slot's window is the index of the
// rule's store window of width W (at least the rate's tolerance, see
// PaceHashed) holding the key's last decision, and own[1] the TAT as
// nanoseconds after that window's start (0: at or before it). The other
// counts stay zero. So a paced key takes one slot like a windowed key, is
// bounded by the same MaxKeys and MaxBytes, and is evicted and swept by the
// same rules:
//
//   - a key whose windows have all passed (Sweep) has a TAT at or before
//     now: dropping it changes no decision;
//   - a key is being limited (SetProtect) when its TAT lies at least the
//     rule's threshold, in nanoseconds, after its window's start, or a
//     request of it was denied in its live windows.
//
// Paced keys are this replica's own: never marked for Flush, so never
// replicated.

// A Pacer is the rule of a paced key (a GCRA rate, package gcra): Pace
// decides a request of cost at now for a key whose TAT is tat (now for a
// key never seen), returning the key's TAT after it and whether it is
// admitted; Spend returns the TAT after an admission of cost at now that
// was decided elsewhere. The store calls them under a shard's lock: they
// must be pure and quick. The store returns the TAT a request was decided
// against, from which the caller derives the rest of the decision.
type Pacer interface {
	Pace(tat, now int64, cost uint64) (next int64, admitted bool)
	Spend(tat, now int64, cost uint64) int64
}

// PaceHashed decides a request of cost for (rule, key) at now (Unix
// nanoseconds) by p, with h the Hash of (rule, key); with count, an
// admitted request moves the key's TAT. width is the rule's store window in
// nanoseconds: it must be at least the rate's tolerance (the time a key
// takes to earn its burst back), so that the TAT of a key whose windows
// have all passed is at or before now. A key the store has no room for is
// decided (and with count, counted) by its rule's shared TAT in the shard,
// which errs towards denying: untracked reports it. tat is the TAT the
// request was decided against (p.Pace's first argument).
func (s *Store) PaceHashed(h uint64, rule RuleID, key string, now, width int64, p Pacer, cost uint64, count bool) (tat int64, untracked bool) {
	sh := s.shardOf(h)
	idx, _ := window.Split(now, width)
	sh.mu.Lock()
	tat, _, untracked = sh.pace(s, h, rule, key, now, idx, width, p, cost, count)
	sh.mu.Unlock() // not deferred: a deferred unlock costs a decision a call
	return tat, untracked
}

// pace is PaceHashed in h's shard sh, with idx the index of now's window
// of width; the caller holds sh.mu.
func (sh *shard) pace(s *Store, h uint64, rule RuleID, key string, now, idx, width int64, p Pacer, cost uint64, count bool) (tat int64, admitted, untracked bool) {
	i, ok := sh.find(h, rule, key)
	if !ok {
		if !count && (sh.used >= sh.cap || !sh.roomFor(sh.keyGrowth(len(key)))) {
			// As Admit does: a check of a new key in a full shard is
			// judged as a key without room, so that the count agrees.
			tat, admitted = sh.paceUntracked(s, rule, now, p, cost, false)
			return tat, admitted, true
		}
		next, admitted := p.Pace(now, now, cost) // a key never seen
		if !admitted || !count {
			return now, admitted, false
		}
		if i, ok = sh.insert(s, h, rule, key, idx); !ok {
			tat, admitted = sh.paceUntracked(s, rule, now, p, cost, true)
			return tat, admitted, true
		}
		sl := &sh.slots[i]
		sl.other = [2]uint64{} // no sketch's estimate: a TAT is no count
		sl.own[1] = tatOffset(next, sl.win, width)
		return now, true, false
	}
	sl := &sh.slots[i]
	tat = window.Start(sl.win, width) + int64(sl.own[1])
	if idx > sl.win {
		if idx > sh.now[rule] {
			sh.now[rule] = idx
		}
		sl.mark = shiftMark(sl.mark, idx-sl.win)
		sl.win = idx
		sl.own[1] = tatOffset(tat, idx, width)
	}
	next, admitted := p.Pace(tat, now, cost)
	switch {
	case !count:
	case admitted:
		sl.own[1] = tatOffset(next, sl.win, width)
	default:
		sl.mark |= markDenied1
	}
	return tat, admitted, false
}

// PaceTAT returns the TAT of (rule, key) kept by PaceHashed with width, and
// whether the store holds the key.
func (s *Store) PaceTAT(rule RuleID, key string, width int64) (int64, bool) {
	sh, i, ok := s.lockSlot(rule, key)
	if !ok {
		return 0, false
	}
	defer sh.mu.Unlock()
	sl := &sh.slots[i]
	return window.Start(sl.win, width) + int64(sl.own[1]), true
}

// tatOffset is tat as kept in a slot of window idx: nanoseconds after the
// window's start, 0 for a TAT at or before it (which decides as now does).
func tatOffset(tat, idx, width int64) uint64 {
	if d := tat - window.Start(idx, width); d > 0 {
		return uint64(d)
	}
	return 0
}

// paceUntracked decides a request of a key of rule that found no room with
// the rule's shared TAT in the shard (aggregate.tat), moving it when count
// and admitted; it returns the shared TAT it decided against. The caller
// holds sh.mu.
func (sh *shard) paceUntracked(s *Store, rule RuleID, now int64, p Pacer, cost uint64, count bool) (tat int64, admitted bool) {
	a := sh.aggregateOf(rule)
	tat = a.tat
	next, admitted := p.Pace(tat, now, cost)
	switch {
	case !count:
	case admitted:
		a.tat = next
	default:
		s.untrackedDenied.Add(1)
	}
	return tat, admitted
}
