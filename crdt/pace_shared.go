package crdt

import "github.com/geolimit/geolimit/window"

// Shared paced keys: a pace kept by several replicas (a pop- or
// global-scope GCRA rule).
//
// Such a rule keeps two things per key. What it admitted is counted as a
// windowed rule counts, under the rule's counted id: this replica's own
// cost per window in the key's slot (CountHashed), the other replicas'
// per-replica entries merged by the G-counter merge (MergeHashedDiff). So
// replication, anti-entropy, eviction and the state file treat those counts
// as they treat any rule's. The decision reads a TAT that this replica keeps
// for itself under the rule's paced id (PaceHashed), never replicated: the
// leaky bucket of every increase of the key's counts this replica has seen,
// each at the time it saw it. An own admission moves it by PaceHashed; a
// merged entry that raised a remote replica's count by d moves it as an
// admission of cost d at the time of the merge would, unchecked
// (PaceAddHashed). A TAT is never merged with another replica's: concurrent
// admissions are each counted once, by the replica that made them, and
// reach every other replica as an increase of its entry.

// CountHashed adds cost to this replica's own count of (rule, key) in
// window now.Index, with h the Hash of (rule, key), and marks it for Flush,
// deciding nothing: the count of an admission decided elsewhere (a shared
// paced key's TAT). A key the store has no room for is counted in its
// rule's counter of keys without room; CountHashed reports whether the key
// had room. If now lies a window before the key's current window (the
// clock went backwards) the cost is counted in the key's current window;
// further back, the key moves back to now's window first, as in Admit.
func (s *Store) CountHashed(h uint64, rule RuleID, key string, now Now, cost uint64) bool {
	sh := s.shardOf(h)
	sh.mu.Lock()
	ok := sh.countOwn(s, h, rule, key, now, cost)
	sh.mu.Unlock() // not deferred: a deferred unlock costs a decision a call
	return ok
}

// countOwn is CountHashed in h's shard sh; the caller holds sh.mu.
func (sh *shard) countOwn(s *Store, h uint64, rule RuleID, key string, now Now, cost uint64) bool {
	i, ok := sh.find(h, rule, key)
	if !ok {
		if i, ok = sh.insert(s, h, rule, key, now.Index); !ok {
			a := sh.aggregateOf(rule)
			a.roll(now.Index)
			a.c[1] = satAdd(a.c[1], cost)
			sh.sketchFor(s, rule).add(h, now.Index, [2]uint64{0, cost})
			return false
		}
	}
	sl := &sh.slots[i]
	if now.Index > sl.win {
		sh.roll(i, sl, now.Index)
	} else if steppedBack(sl, now) {
		sh.rebase(i, sl, now.Index)
	}
	sl.own[1] = satAdd(sl.own[1], cost)
	sh.markDirty(i, sl, dirtyOwn1|dirtyPoP1)
	return true
}

// MergeHashedDiff is MergeHashed that also returns by how much the merge
// raised the key's count: the entry's count less what replica rep had of
// window win, when Merged; 0 otherwise.
func (s *Store) MergeHashedDiff(h uint64, rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) (MergeOutcome, uint64) {
	if rep == SelfID || win < nowIndex-1 || win > nowIndex+1 || count == 0 {
		return s.MergeHashed(h, rule, key, nowIndex, win, rep, count), 0
	}
	sh := s.shardOf(h)
	sh.mu.Lock()
	var prior uint64
	if i, ok := sh.find(h, rule, key); ok {
		es := sh.side.get(i)
		j := sideSearch(es, rep, win, int(s.nreps.Load()))
		if j < len(es) && es[j].rep() == rep && es[j].win(win) == win {
			prior = es[j].count
		}
	}
	o := sh.merge(s, h, rule, key, nowIndex, win, rep, count)
	sh.mu.Unlock()
	if o != Merged {
		return o, 0
	}
	return o, count - prior
}

// PaceAddHashed moves the TAT of (rule, key), kept by PaceHashed with
// width, as an admission of cost at now would, without deciding: the TAT
// becomes p.Spend(TAT, now, cost). A key not held starts from
// now (an empty bucket); one the store has no room for moves its rule's
// shared TAT in the shard, which PaceHashed decides such keys by. h is the
// Hash of (rule, key).
func (s *Store) PaceAddHashed(h uint64, rule RuleID, key string, now, width int64, p Pacer, cost uint64) {
	if cost == 0 {
		return
	}
	idx, _ := window.Split(now, width)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, rule, key)
	if !ok {
		if i, ok = sh.insert(s, h, rule, key, idx); !ok {
			a := sh.aggregateOf(rule)
			a.tat = p.Spend(a.tat, now, cost)
			return
		}
		sh.slots[i].other = [2]uint64{} // no sketch's estimate: a TAT is no count
	}
	sl := &sh.slots[i]
	tat := window.Start(sl.win, width) + int64(sl.own[1])
	if idx > sl.win {
		if idx > sh.now[rule] {
			sh.now[rule] = idx
		}
		sl.mark = shiftMark(sl.mark, idx-sl.win)
		sl.win = idx
	}
	sl.own[1] = tatOffset(p.Spend(tat, now, cost), sl.win, width)
}
