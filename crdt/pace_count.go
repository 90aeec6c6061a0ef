package crdt

// PaceCountHashed decides a request of cost for a shared paced key under
// one lock: it is PaceHashed of (paced, key) at now with count, with idx
// the index of now's window of width (window.Split), then, when admitted,
// CountHashed of cost for (counted, key) in window at. hp and hc
// are the Hashes of (paced, key) and (counted, key), which lie in one shard
// (see ruleMix); RuleHash derives one from the other. It returns what
// PaceHashed does and, as CountHashed reports, whether the counted key had
// room (true when nothing was counted).
func (s *Store) PaceCountHashed(hp uint64, paced RuleID, hc uint64, counted RuleID, key string, now, idx, width int64, p Pacer, at Now, cost uint64) (tat int64, untracked, room bool) {
	sh := s.shardOf(hp)
	sh.mu.Lock()
	tat, admitted, untracked := sh.pace(s, hp, paced, key, now, idx, width, p, cost, true)
	room = true
	if admitted {
		room = sh.countOwn(s, hc, counted, key, at, cost)
	}
	sh.mu.Unlock() // not deferred: a deferred unlock costs a decision a call
	return tat, untracked, room
}
