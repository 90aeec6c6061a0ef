package crdt

// lockSlot finds (rule, key) and returns its shard, locked, and its slot's
// position; ok is false, and nothing locked, when the key is not held.
// The caller unlocks sh.mu.
func (s *Store) lockSlot(rule RuleID, key string) (sh *shard, i int32, ok bool) {
	h := s.hash(rule, key)
	sh = s.shardOf(h)
	sh.mu.Lock()
	if i, ok = sh.find(h, rule, key); !ok {
		sh.mu.Unlock()
		return nil, 0, false
	}
	return sh, i, true
}

// Peek returns the totals (every replica's counts) of (rule, key) in
// window nowIndex-1 and nowIndex, without changing anything: not even the
// roll of the key's windows that Admit makes. A key held with windows ahead
// of nowIndex (a peer's clock runs ahead) reports its own two windows, as
// Admit decides it. ok is false when the key is not held.
func (s *Store) Peek(rule RuleID, key string, nowIndex int64) (prev, cur uint64, ok bool) {
	sh, i, ok := s.lockSlot(rule, key)
	if !ok {
		return 0, 0, false
	}
	defer sh.mu.Unlock()
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
	sh, i, ok := s.lockSlot(rule, key)
	if !ok {
		return slot{}, nil, false
	}
	defer sh.mu.Unlock()
	return sh.slots[i], append(buf, sh.side.get(i)...), true
}

// OwnDemand returns what this replica was asked of (rule, key) in window
// win: the cost it admitted there and the cost it denied. ok is false when
// it cannot say: the key is not held, win is no longer one of its live
// windows, or the replica denied the key there while the key had no hot
// entry counting its denials (only a key near its limit has one, and a key
// far below its limit is denied nothing); demand is then what it admitted
// there, as far as it knows, a lower bound.
func (s *Store) OwnDemand(rule RuleID, key string, win int64) (demand uint64, ok bool) {
	sh, i, ok := s.lockSlot(rule, key)
	if !ok {
		return 0, false
	}
	defer sh.mu.Unlock()
	sl := &sh.slots[i]
	var own uint64
	var mark uint8
	switch win {
	case sl.win:
		own, mark = sl.own[1], markDenied1
	case sl.win - 1:
		own, mark = sl.own[0], markDenied0
	default:
		return 0, win > sl.win // later: nothing asked yet
	}
	if sl.mark&mark == 0 {
		return own, true
	}
	if sl.flags&flagHot == 0 {
		return own, false
	}
	d, ok := sh.hotSlab[sh.hot[i]].deniedIn(win)
	if !ok {
		return own, false
	}
	return satAdd(own, d), true
}
