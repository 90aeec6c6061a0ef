package crdt

import "unsafe"

// The memory budget.
//
// With StoreConfig.MaxBytes set, each shard holds at most its part of it
// (MaxBytes / shards) in the bytes the store accounts for: its slot table
// with the table of remote entries' lists beside it, the remote entries
// themselves (by capacity), the arena of long keys and the sketches of
// evicted keys (StoreStats). MaxKeys bounds the keys; the budget bounds
// what they hold, which MaxKeys does not: a key of a global rule holds an
// entry per remote replica and window, up to MaxReplicasPerKey, and a flood
// of well-formed deltas from many replicas would otherwise grow the remote
// entries of every key to that.
//
// A shard at its budget makes room for a new key as a full shard does
// (evict.go), and refuses a remote entry it has no room for (Merge reports
// Full), which errs towards admitting: the remote count is not seen
// until anti-entropy sends it again and there is room. Own counts are never
// refused: they live in the slot.

// bytes is what the shard accounts for; the caller holds sh.mu.
func (sh *shard) bytes() int {
	return len(sh.slots)*int(unsafe.Sizeof(slot{})) + sideListSize*len(sh.side.lists) + sh.side.bytes +
		cap(sh.arena) + sh.sketchBytes
}

// roomFor reports whether the shard may grow by n more bytes; the caller
// holds sh.mu.
func (sh *shard) roomFor(n int) bool { return !sh.budgeted || sh.bytes()+n <= sh.maxBytes }

// keyGrowth is how many bytes the shard grows by when it takes a new key
// of klen bytes: a table that must grow (by half), a long key.
func (sh *shard) keyGrowth(klen int) int {
	n := 0
	if (sh.used+1)*8 > len(sh.slots)*maxLoad {
		per := int(unsafe.Sizeof(slot{}))
		if sh.side.lists != nil {
			per += sideListSize
		}
		n += len(sh.slots) / 2 * per
	}
	if klen > inlineKeyLen && len(sh.arena)+klen > cap(sh.arena) {
		n += max(cap(sh.arena), klen)
	}
	return n
}

// entryGrowth is how many bytes the shard may grow by when a key holding
// es takes one more remote entry.
func (sh *shard) entryGrowth(es []sideEntry) int {
	n := 0
	if len(es) == cap(es) {
		n = sideGrowth(len(es)) * sideEntrySize
	}
	if sh.side.lists == nil {
		n += sideListSize * len(sh.slots)
	}
	return n
}
