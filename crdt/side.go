package crdt

import (
	"unsafe"
)

// sideTable holds a shard's remote entries (sideEntry), by slot position:
// lists[i] is slot i's, empty for none. A merge finds a key's entries with
// one read of a handle parallel to the slots, at the key's position, which
// Store.Hash prefetches with the slot; a map keyed by position took a hash
// and a probe of its own. Moving a slot moves one handle. lists is
// allocated with the shard's first remote entry (a node with only
// node-scope rules never has one) and kept until a rehash finds none.
type sideTable struct {
	lists []sideList
	live  int // lists that are not empty
	bytes int // the lists' capacity in bytes
}

// sideList is a list of remote entries as the table keeps it: its first
// entry, length and capacity, two thirds of a slice header. A table holds
// one for every slot, used or not, and a node of a large fleet holds
// hundreds of thousands of slots; the header took 24 bytes a slot, a sixth
// of the heap of a 300-PoP fleet in one process.
type sideList struct {
	p    *sideEntry
	n, c uint32
}

// sideListSize is the size of a sideList in bytes.
const sideListSize = int(unsafe.Sizeof(sideList{}))

// entries returns the list as a slice (nil for none).
func (l sideList) entries() []sideEntry {
	if l.p == nil {
		return nil
	}
	return unsafe.Slice(l.p, l.c)[:l.n]
}

// listOf returns es (not empty) as a sideList. A list never holds more
// than MaxReplicasPerKey entries, far below what a uint32 counts.
func listOf(es []sideEntry) sideList {
	return sideList{p: unsafe.SliceData(es), n: uint32(len(es)), c: uint32(cap(es))}
}

// insertSide inserts e into es at j. A full list grows by a quarter (at
// least sideGrowMin entries), not by doubling as append does: a node holds
// a list per key of every PoP of its region and every other region's
// voice, up to three windows of each, and lists grown by doubling held
// up to half their capacity unused.
func insertSide(es []sideEntry, j int, e sideEntry) []sideEntry {
	if len(es) == cap(es) {
		g := make([]sideEntry, len(es), len(es)+sideGrowth(len(es)))
		copy(g, es)
		es = g
	}
	es = es[:len(es)+1]
	copy(es[j+1:], es[j:])
	es[j] = e
	return es
}

// sideGrowth is how many entries a full list of n grows by (insertSide).
func sideGrowth(n int) int { return max(n/4, sideGrowMin) }

// sideGrowMin is the least a full list grows by.
const sideGrowMin = 2

// sideEntrySize is the size of a sideEntry in bytes.
const sideEntrySize = int(unsafe.Sizeof(sideEntry{}))

// get returns slot i's entries (nil for none).
func (t *sideTable) get(i int32) []sideEntry {
	if t.lists == nil {
		return nil
	}
	return t.lists[i].entries()
}

// set makes es (not empty) slot i's entries, in a table of n slots; it
// reports whether it allocated the table's lists.
func (t *sideTable) set(i int32, es []sideEntry, n int) bool {
	grown := t.lists == nil
	if grown {
		t.lists = make([]sideList, n)
	}
	if t.lists[i].p == nil {
		t.live++
	}
	t.bytes += (cap(es) - int(t.lists[i].c)) * sideEntrySize
	t.lists[i] = listOf(es)
	return grown
}

// del drops slot i's entries.
func (t *sideTable) del(i int32) {
	if t.lists != nil && t.lists[i].p != nil {
		t.bytes -= int(t.lists[i].c) * sideEntrySize
		t.lists[i] = sideList{}
		t.live--
	}
}

// move moves slot from's entries to the empty position to.
func (t *sideTable) move(from, to int32) {
	if t.lists != nil {
		t.lists[to], t.lists[from] = t.lists[from], sideList{}
	}
}

// rebuilt returns an empty table for n slots, for the caller to re-set
// t's lists in (rehash); without lists when t holds none.
func (t *sideTable) rebuilt(n int) sideTable {
	if t.live == 0 {
		return sideTable{}
	}
	return sideTable{lists: make([]sideList, n)}
}

// setSide makes es slot i's entries; the caller holds sh.mu.
func (sh *shard) setSide(i int32, es []sideEntry) {
	if sh.side.set(i, es, len(sh.slots)) {
		sh.noteSideBase()
	}
}

// noteSideBase publishes where the side lists are, for Store.Hash's
// prefetch; the caller holds sh.mu and has just replaced sh.side.lists.
func (sh *shard) noteSideBase() {
	sh.sideBase.Store(uintptr(unsafe.Pointer(unsafe.SliceData(sh.side.lists))))
}

// sideSearch returns the position in es of the first entry not below
// (rep, win): a key's entries are sorted by (replica, window), and with
// hundreds of PoPs a key holds hundreds of them, several kilobytes. nreps
// bounds the replica IDs (the store's table of replicas): IDs are handed
// out densely, so a key that most replicas count in (a hot key, which most
// merges are for) holds rep's entries near len(es)*rep/nreps. The search
// starts there and gallops out to bracket the position, so that it reads
// one or two cache lines where a binary search over the whole list reads
// one per halving; on a sparse list the guess is off and the gallop costs
// about what the binary search would.
func sideSearch(es []sideEntry, rep ReplicaID, win int64, nreps int) int {
	n := len(es)
	before := func(e *sideEntry) bool {
		return e.rep() < rep || e.rep() == rep && e.win(win) < win
	}
	lo, hi := 0, n
	if n >= sideGuessMin && nreps > 0 {
		g := sideGuess(n, rep, nreps)
		if before(&es[g]) {
			// The position is after g: gallop right from g+1.
			lo = g + 1
			for step := 4; ; step <<= 1 {
				if p := lo + step; p < n && before(&es[p]) {
					lo = p + 1
				} else {
					hi = min(p, n)
					break
				}
			}
		} else {
			// At or before g: gallop left.
			hi = g
			for step := 4; ; step <<= 1 {
				if p := hi - step; p >= 0 && !before(&es[p]) {
					hi = p
				} else {
					lo = max(p+1, 0)
					break
				}
			}
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if before(&es[m]) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// sideEntry is one remote replica's count of one window of a key: 16 bytes,
// as a key of a fleet of hundreds of PoPs holds hundreds of them.
type sideEntry struct {
	count uint64
	// w is the low 32 bits of the window index: a key's entries lie within
	// one window of its slot's, so the slot's window gives back the rest
	// (win).
	w uint32
	// rm is the ReplicaID, with sideMember set when the replica is a member
	// (see Store.isMember; fixed while the replica is interned).
	rm uint32
}

// sideMember marks a member's sideEntry; ReplicaIDs stay below it.
const sideMember = 1 << 31

func newSideEntry(win int64, rep ReplicaID, count uint64, member bool) sideEntry {
	e := sideEntry{count: count, w: uint32(win), rm: uint32(rep)}
	if member {
		e.rm |= sideMember
	}
	return e
}

// win returns the entry's window index, given near, the window of its
// slot (or any index within 2^31 of the entry's).
func (e *sideEntry) win(near int64) int64 { return near + int64(int32(e.w-uint32(near))) }

func (e *sideEntry) rep() ReplicaID { return ReplicaID(e.rm &^ sideMember) }

func (e *sideEntry) member() bool { return e.rm&sideMember != 0 }
