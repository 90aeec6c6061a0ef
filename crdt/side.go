package crdt

// sideTable holds a shard's remote entries (sideEntry), by slot position:
// at[i] is 1 + the index in lists of slot i's entries, 0 for none. A merge
// finds a key's entries with one read of a pointer-free array, where a map
// keyed by position took a hash and a probe of its own; moving a slot moves
// one int32. at is allocated with the shard's first remote entry and kept
// until a rehash finds none (a node with only node-scope rules never has
// one), and lists reuses the places freed.
type sideTable struct {
	at    []int32
	lists [][]sideEntry
	free  []int32
}

// get returns slot i's entries (nil for none).
func (t *sideTable) get(i int32) []sideEntry {
	if t.at == nil {
		return nil
	}
	if x := t.at[i]; x != 0 {
		return t.lists[x-1]
	}
	return nil
}

// set makes es slot i's entries, in a table of n slots.
func (t *sideTable) set(i int32, es []sideEntry, n int) {
	if t.at == nil {
		t.at = make([]int32, n)
	}
	x := t.at[i]
	if x == 0 {
		if k := len(t.free); k > 0 {
			x, t.free = t.free[k-1], t.free[:k-1]
		} else {
			t.lists = append(t.lists, nil)
			x = int32(len(t.lists))
		}
		t.at[i] = x
	}
	t.lists[x-1] = es
}

// del drops slot i's entries.
func (t *sideTable) del(i int32) {
	if t.at == nil {
		return
	}
	if x := t.at[i]; x != 0 {
		t.lists[x-1] = nil
		t.free = append(t.free, x)
		t.at[i] = 0
	}
}

// move moves slot from's entries to the empty position to.
func (t *sideTable) move(from, to int32) {
	if t.at != nil {
		t.at[to], t.at[from] = t.at[from], 0
	}
}

// live returns how many slots hold entries.
func (t *sideTable) live() int { return len(t.lists) - len(t.free) }

// rebuilt returns an empty table for n slots and the lists of t compacted
// into it as the caller re-sets them (rehash).
func (t *sideTable) rebuilt(n int) sideTable {
	if t.live() == 0 {
		return sideTable{}
	}
	return sideTable{at: make([]int32, n), lists: make([][]sideEntry, 0, t.live())}
}

// sideSearch returns the position in es of the first entry not below
// (rep, win): a key's entries are sorted by (replica, window), and with
// hundreds of PoPs a key holds hundreds of them. (A search that guesses
// the position from the densely interned replica IDs was measured no
// faster on the 300-PoP scenario: the first read of the list is the miss
// that counts.)
func sideSearch(es []sideEntry, rep ReplicaID, win int64) int {
	lo, hi := 0, len(es)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if e := &es[m]; e.rep() < rep || e.rep() == rep && e.win(win) < win {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}
