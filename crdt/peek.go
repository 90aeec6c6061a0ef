package crdt

// Peek returns the totals (every replica's counts) of (rule, key) in
// window nowIndex-1 and nowIndex, without changing anything: not even the
// roll of the key's windows that Admit makes. A key held with windows ahead
// of nowIndex (a peer's clock runs ahead) reports its own two windows, as
// Admit decides it. ok is false when the key is not held.
func (s *Store) Peek(rule RuleID, key string, nowIndex int64) (prev, cur uint64, ok bool) {
	h := s.hash(rule, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, found := sh.find(h, rule, key)
	if !found {
		return 0, 0, false
	}
	sl := &sh.slots[i]
	p, c := satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1])
	switch {
	case sl.win >= nowIndex:
		return p, c, true
	case sl.win == nowIndex-1:
		return c, 0, true
	}
	return 0, 0, true
}

// PeekOf returns the counts of (rule, key) in windows nowIndex-1 and
// nowIndex owned by the remote replicas pick selects, without changing
// anything; pick is called after the key's shard is unlocked. ok is false
// when the key is not held.
func (s *Store) PeekOf(rule RuleID, key string, nowIndex int64, pick func(ReplicaID) bool) (prev, cur uint64, ok bool) {
	var buf [16]sideEntry
	sl, es, found := s.slotAndSide(rule, key, buf[:0])
	if !found {
		return 0, 0, false
	}
	for _, e := range es {
		switch w := e.win(sl.win); {
		case w == nowIndex-1 && pick(e.rep()):
			prev = satAdd(prev, e.count)
		case w == nowIndex && pick(e.rep()):
			cur = satAdd(cur, e.count)
		}
	}
	return prev, cur, true
}

// slotAndSide returns a copy of (rule, key)'s slot and its remote counts,
// appended to buf, taken under the key's shard lock; ok is false when the
// key is not held.
func (s *Store) slotAndSide(rule RuleID, key string, buf []sideEntry) (sl slot, es []sideEntry, ok bool) {
	h := s.hash(rule, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, found := sh.find(h, rule, key)
	if !found {
		return slot{}, nil, false
	}
	return sh.slots[i], append(buf, sh.side.get(i)...), true
}
