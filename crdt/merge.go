package crdt

// MergeOutcome says what Merge did with an entry.
type MergeOutcome uint8

// Merge outcomes.
const (
	// Merged: the entry raised the replica's count.
	Merged MergeOutcome = iota
	// Unchanged: the entry was not above the count already known.
	Unchanged
	// Stale: the entry's window is older than the live windows.
	Stale
	// Ahead: the entry's window is more than one window ahead of now.
	Ahead
	// Full: the key is new and the store is full, or the key already holds
	// MaxReplicasPerKey entries; the entry was dropped.
	Full
	// Self: the entry claims this store's own replica and was ignored.
	Self
)

// MaxReplicasPerKey caps the per-replica entries one key holds over its live
// windows, so that senders inventing incarnations cannot grow one key without
// bound; entries past it are dropped as Full.
const MaxReplicasPerKey = 1024

// Merge raises replica rep's count of (rule, key, window win) to count if count
// is higher (the G-counter merge: per-replica maximum). nowIndex is the
// receiver's current window index for the rule. When rep is a member, a
// raised count marks the window's PoP total changed for Flush.
func (s *Store) Merge(rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) MergeOutcome {
	return s.MergeHashed(s.hash(rule, key), rule, key, nowIndex, win, rep, count)
}

// MergeHashed is Merge with h, the Hash of (rule, key): a caller merging a
// batch hashes the next entry's key, which prefetches its slot, before it
// merges the current one.
func (s *Store) MergeHashed(h uint64, rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) MergeOutcome {
	if rep == SelfID {
		return Self
	}
	if win < nowIndex-1 {
		return Stale
	}
	if win > nowIndex+1 {
		return Ahead
	}
	if count == 0 {
		return Unchanged // never above what is known; holds no entry
	}
	sh := s.shardOf(h)
	sh.mu.Lock()
	o := sh.merge(s, h, rule, key, nowIndex, win, rep, count)
	sh.mu.Unlock() // not deferred: a deferred method value costs a merge a call through a wrapper
	return o
}

// merge is MergeHashed's work under sh.mu.
func (sh *shard) merge(s *Store, h uint64, rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) MergeOutcome {
	i, ok := sh.find(h, rule, key)
	if !ok {
		if i, ok = sh.insert(s, h, rule, key, nowIndex); !ok {
			return Full
		}
	}
	sl := &sh.slots[i]
	if nowIndex > sl.win {
		sh.roll(i, sl, nowIndex)
	} else if nowIndex < sl.win-1 {
		sh.rebase(i, sl, nowIndex) // the clock went back more than a window
	}
	if win < sl.win-1 {
		return Stale
	}
	if win > sl.win+1 {
		return Ahead
	}
	es := sh.side.get(i)
	j := sideSearch(es, rep, win, int(s.nreps.Load()))
	found := j < len(es) && es[j].rep() == rep && es[j].win(win) == win
	var diff uint64
	var member bool
	if found {
		if count <= es[j].count {
			return Unchanged
		}
		diff = count - es[j].count
		es[j].count = count
		member = es[j].member()
	} else {
		if len(es) >= MaxReplicasPerKey || !sh.roomFor(sh.entryGrowth(es)) {
			return Full
		}
		member = s.isMember(rep)
		sh.setSide(i, insertSide(es, j, newSideEntry(win, rep, count, member)))
		sl.flags |= flagSide
		diff = count
	}
	k := win - (sl.win - 1) // 0, 1 or 2
	if k == 0 || k == 1 {
		sl.other[k] = satAdd(sl.other[k], diff)
	}
	if member {
		sh.markDirty(i, sl, dirtyPoP0<<k)
	} else if s.regional.Load().has(rep) {
		sl.mark |= markAERegion0 // a PoP total of the own region
	}
	return Merged
}
