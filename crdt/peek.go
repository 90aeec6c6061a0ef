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
