package crdt

import "unsafe"

// sideGuessMin is the length from which sideSearch starts at sideGuess: a
// shorter list spans a few cache lines at most.
const sideGuessMin = 16

// sideGuess is where replica rep's entries are likely to sit in a list of n
// entries, given nreps > 0 replicas known (see sideSearch).
func sideGuess(n int, rep ReplicaID, nreps int) int {
	return min(int(uint64(n)*uint64(rep)/uint64(nreps)), n-1)
}

// PrefetchSide prefetches the line of the key's list of remote counts that
// a merge of replica rep's count of (rule, key), of hash h, reads first,
// without waiting for it. In a fleet of hundreds of PoPs a hot key holds
// hundreds of counts, kilobytes, and that line is one more cache miss a
// merge takes after its slot's: a caller merging a batch calls
// PrefetchShard, then PrefetchSlot, then PrefetchSide for every entry of a
// block before it merges them, so that the misses overlap. It locks h's
// shard (briefly: a look-up) and does nothing while the store knows fewer
// replicas than a list needs to span several lines, nor for a key absent.
func (s *Store) PrefetchSide(h uint64, rule RuleID, key string, rep ReplicaID) {
	nreps := int(s.nreps.Load())
	if nreps < sideGuessMin {
		return
	}
	sh := s.shardOf(h)
	sh.mu.Lock()
	if len(sh.slots) > 0 {
		if i, ok := sh.find(h, rule, key); ok {
			if es := sh.side.get(i); len(es) >= sideGuessMin {
				prefetch(uintptr(unsafe.Pointer(&es[sideGuess(len(es), rep, nreps)])))
			}
		}
	}
	sh.mu.Unlock()
}
