package crdt

import (
	"github.com/geolimit/geolimit/gcra"
	"github.com/geolimit/geolimit/window"
)

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

// PaceResult is the outcome of PaceHashed.
type PaceResult struct {
	gcra.Result
	// Untracked is set when the key is new and the store had no room for
	// it: the request was decided, and counted when admitted, by the one
	// TAT the rule's keys without room share in the shard.
	Untracked bool
}

// PaceHashed decides a request of cost for (rule, key) at now (Unix
// nanoseconds) under rate, with h the Hash of (rule, key), into *res; with
// count, an admitted request moves the key's TAT. width is the rule's store
// window in nanoseconds: it must be at least rate.Tolerance(), so that the
// TAT of a key whose windows have all passed is at or before now. A key the
// store has no room for is decided (and with count, counted) by its rule's
// shared TAT in the shard, which errs towards denying.
func (s *Store) PaceHashed(res *PaceResult, h uint64, rule RuleID, key string, now, width int64, rate gcra.Rate, cost uint64, count bool) {
	sh := s.shardOf(h)
	idx, _ := window.Split(now, width)
	sh.mu.Lock()
	sh.pace(s, res, h, rule, key, now, idx, width, rate, cost, count)
	sh.mu.Unlock() // not deferred: a deferred unlock costs a decision a call
}

// pace is PaceHashed in h's shard sh, with idx the index of now's window
// of width; the caller holds sh.mu.
func (sh *shard) pace(s *Store, res *PaceResult, h uint64, rule RuleID, key string, now, idx, width int64, rate gcra.Rate, cost uint64, count bool) {
	i, ok := sh.find(h, rule, key)
	res.Untracked = false
	if !ok {
		if !count && (sh.used >= sh.cap || !sh.roomFor(sh.keyGrowth(len(key)))) {
			// As Admit does: a check of a new key in a full shard is
			// judged as a key without room, so that the count agrees.
			sh.paceUntracked(s, res, rule, now, rate, cost, false)
			return
		}
		rate.Decide(&res.Result, now, now, cost) // a key never seen
		if !res.Allowed || !count {
			return
		}
		if i, ok = sh.insert(s, h, rule, key, idx); !ok {
			sh.paceUntracked(s, res, rule, now, rate, cost, true)
			return
		}
		sl := &sh.slots[i]
		sl.other = [2]uint64{} // no sketch's estimate: a TAT is no count
		sl.own[1] = tatOffset(res.TAT, sl.win, width)
		return
	}
	sl := &sh.slots[i]
	tat := window.Start(sl.win, width) + int64(sl.own[1])
	if idx > sl.win {
		if idx > sh.now[rule] {
			sh.now[rule] = idx
		}
		sl.mark = shiftMark(sl.mark, idx-sl.win)
		sl.win = idx
		sl.own[1] = tatOffset(tat, idx, width)
	}
	rate.Decide(&res.Result, tat, now, cost)
	switch {
	case !count:
	case res.Allowed:
		sl.own[1] = tatOffset(res.TAT, sl.win, width)
	default:
		sl.mark |= markDenied1
	}
}

// PaceTAT returns the TAT of (rule, key) kept by PaceHashed with width, and
// whether the store holds the key.
func (s *Store) PaceTAT(rule RuleID, key string, width int64) (int64, bool) {
	h := s.hash(rule, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, rule, key)
	if !ok {
		return 0, false
	}
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
// and admitted. The caller holds sh.mu.
func (sh *shard) paceUntracked(s *Store, res *PaceResult, rule RuleID, now int64, rate gcra.Rate, cost uint64, count bool) {
	a := sh.aggregateOf(rule)
	rate.Decide(&res.Result, a.tat, now, cost)
	res.Untracked = true
	switch {
	case !count:
	case res.Allowed:
		a.tat = res.TAT
	default:
		s.untrackedDenied.Add(1)
	}
}
