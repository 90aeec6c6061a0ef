package crdt

import "github.com/geolimit/geolimit/gcra"

// PaceCountHashed decides a request of cost for a shared paced key under
// one lock: it is PaceHashed of (paced, key) at now with count, with idx
// the index of now's window of width (window.Split), then, when admitted,
// CountHashed of cost for (counted, key) in window at. hp and hc
// are the Hashes of (paced, key) and (counted, key), which lie in one shard
// (see ruleMix); RuleHash derives one from the other. It reports, as
// CountHashed does, whether the counted key had room (true when nothing was
// counted).
func (s *Store) PaceCountHashed(res *PaceResult, hp uint64, paced RuleID, hc uint64, counted RuleID, key string, now, idx, width int64, rate gcra.Rate, at Now, cost uint64) bool {
	sh := s.shardOf(hp)
	sh.mu.Lock()
	sh.pace(s, res, hp, paced, key, now, idx, width, rate, cost, true)
	ok := true
	if res.Allowed {
		ok = sh.countOwn(s, hc, counted, key, at, cost)
	}
	sh.mu.Unlock() // not deferred: a deferred unlock costs a decision a call
	return ok
}
