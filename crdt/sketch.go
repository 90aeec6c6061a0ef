package crdt

import (
	"math"
	"unsafe"
)

// What eviction remembers.
//
// A key evicted to make room (evict.go) leaves its counts behind in its
// rule's sketch in the shard: a count-min sketch of windowed counters,
// sketchRows rows of a power-of-two width, each cell an aggregate. A key
// new to the shard starts from the sketch's estimate of it, the smallest of
// its cells, as counts of other replicas (slot.other): never below what the
// key held when it was evicted, so coming back never hands a key a fresh
// count. A key that finds no room is decided by its estimate too, besides
// its rule's aggregate, and its admits are added to its cells, so that it
// cannot spend without room and then come back with room and a clean count.
//
// The estimate errs only upwards: a cell holds the most that any key sharing
// it was evicted with, and a key starts from its cells' estimate, so a cell
// grows by what the keys sharing it spend while held. A key's estimate is
// then at most what the evicted keys sharing each of its cells spent in the
// live windows (usually far less): a flood of new keys spends more than the
// width x the limit in the live windows of a shard before the keys new to it
// start out denied. A sketch is allocated with its rule's first eviction in
// the shard, sized to the rule's part of the room (ruleTable.share): its
// rows are at most that part wide (and at least minSketchWidth), each cell
// 36 bytes with its fingerprint (72 bytes per key of the part), and it
// narrows (by folding, which keeps every estimate at or above its truth)
// when more rules come to share the shard. Under a memory budget
// (StoreConfig.MaxBytes) it is sized to the bytes too: at most the rule's
// part of a quarter of the shard's bytes, and no more than the room the
// keys left. Its memory is part of the store's accounted bytes
// (StoreStats.SketchBytes).
//
// A flood must not turn the sketch against other keys. Each cell also
// keeps the fingerprint of the key whose counts it holds alone (0 when
// several keys' counts mix in it): a key that finds its own fingerprint in
// a cell starts from that cell's counts in full, which bound its own (a
// key held at its limit, evicted and back, is still denied). A key that
// finds none starts from the others' counts capped at its rule's noise cap
// (noiseCap: two below its protection threshold, SetProtect). Before, each
// key of a flood started from its neighbours' counts and left them one
// higher, until new keys started at their protection threshold: every
// one of them was then being limited, the room filled with them, and the
// rule's new keys were decided by its aggregate and denied (250 000 new
// keys of one request in 10 s denied 10 of 10 fresh keys of another
// client; now none). What the cap costs: a key whose own cells were all
// taken over by keys that spent more restarts from the cap, not from its
// count, and gains at most one request per such eviction (it is evicted
// only below its protection threshold, evict.go). What it leaves: a flood
// whose keys each spend two requests or more still turns its keys into
// keys being limited, as before.
//
// The estimate is a floor held in slot.other, which roll keeps apart from
// the sums of the remote replicas' entries. It is the node's own: Flush
// sends own counts only. A returning key's remote counts merged again are
// counted twice until their windows pass: the error is towards denying.

// sketchRows is the number of rows of a sketch; minSketchWidth and
// maxSketchWidth bound the width of a row.
const (
	sketchRows     = 2
	minSketchWidth = 8
	maxSketchWidth = 1 << 16
)

// sketch is a count-min sketch of the windowed counts of a rule's keys in
// one shard: row r of width w is cells[r*w : (r+1)*w].
type sketch struct {
	mask  uint64 // width - 1
	cells []aggregate
	// fps are the cells' fingerprints (fingerprint): of the one key whose
	// counts a cell holds, 0 when several keys' counts mix in it.
	fps []uint32
	// noiseCap bounds the live windows' total of an estimate taken from
	// other keys' cells (noiseCap); math.MaxUint64: no bound.
	noiseCap uint64
}

// newSketch is a sketch of width w (a power of two) and noise cap nc.
func newSketch(w int, nc uint64) *sketch {
	return &sketch{mask: uint64(w - 1), cells: make([]aggregate, sketchRows*w), fps: make([]uint32, sketchRows*w), noiseCap: nc}
}

// fingerprint is the fingerprint of key hash h in a cell: never 0.
func fingerprint(h uint64) uint32 { return uint32(h>>32) | 1 }

// noiseCap is the bound on the estimate a key takes from other keys' cells
// for a rule of protection threshold protect (SetProtect): two below it,
// so that a new key that starts there and spends one request is still not
// being limited (and may be evicted for the next new key). Without a threshold (0: every key is being
// limited, and none is evicted for room but borrowed room) there is none.
func noiseCap(protect uint64) uint64 {
	if protect == 0 {
		return math.MaxUint64
	}
	return max(protect, 2) - 2
}

// capTotal lowers c, older window first, so that c[0] + c[1] <= nc.
func capTotal(c [2]uint64, nc uint64) [2]uint64 {
	c[1] = min(c[1], nc)
	c[0] = min(c[0], nc-c[1])
	return c
}

// sketchWidth is the width of a sketch for a rule's part of a shard, share
// keys: the largest power of two not above share, within the bounds.
func sketchWidth(share int) int {
	w := minSketchWidth
	for 2*w <= share && w < maxSketchWidth {
		w <<= 1
	}
	return w
}

// cellsOf returns the positions of h's cells, one per row.
func (k *sketch) cellsOf(h uint64) [sketchRows]int {
	w := int(k.mask + 1)
	x := mix64(h)
	return [sketchRows]int{int(x & k.mask), w + int(x>>32&k.mask)}
}

// raise raises h's cells to counts c (c[0] of window win-1, c[1] of window
// win) where they are below: c is all that is known of h's counts (a slot's
// counts include the estimate it started from). This is the sketch's
// conservative update: each of h's cells stays at or above h's counts, and
// every other key's cells too. A cell that c raises in every window it
// changes becomes h's own (its fingerprint), one it raises in part a
// mixed one.
func (k *sketch) raise(h uint64, win int64, c [2]uint64) {
	fp := fingerprint(h)
	for _, i := range k.cellsOf(h) {
		a := &k.cells[i]
		if a.win > win {
			a.add(win, c) // a clock gone back: plain addition
			k.fps[i] = 0
			continue
		}
		a.roll(win)
		old := a.c
		a.c[0], a.c[1] = max(a.c[0], c[0]), max(a.c[1], c[1])
		switch {
		case a.c == old: // h's counts are within the cell's: its owner stays
		case a.c == c:
			k.fps[i] = fp
		default:
			k.fps[i] = 0
		}
	}
}

// add adds counts c to h's estimate at window win: a request of a key the
// shard does not hold.
func (k *sketch) add(h uint64, win int64, c [2]uint64) {
	est := k.estimate(h, win)
	k.raise(h, win, [2]uint64{satAdd(est[0], c[0]), satAdd(est[1], c[1])})
}

// estimate returns h's counts of windows now-1 and now: at or above the
// counts added for h, rolled on to now, when a cell of h's is still its
// own; else the cells' counts within the noise cap. Counts of windows
// after now (a clock gone back) are taken as now's.
func (k *sketch) estimate(h uint64, now int64) [2]uint64 {
	fp := fingerprint(h)
	est := [2]uint64{^uint64(0), ^uint64(0)}
	own, mine := [2]uint64{^uint64(0), ^uint64(0)}, false
	for _, i := range k.cellsOf(h) {
		a := &k.cells[i]
		var c [2]uint64
		switch d := now - a.win; {
		case d < 0:
			c = [2]uint64{0, satAdd(a.c[0], a.c[1])}
		case d == 0:
			c = a.c
		case d == 1:
			c = [2]uint64{a.c[1], 0}
		}
		est[0], est[1] = min(est[0], c[0]), min(est[1], c[1])
		if k.fps[i] == fp {
			own[0], own[1], mine = min(own[0], c[0]), min(own[1], c[1]), true
		}
	}
	if mine {
		return own
	}
	return capTotal(est, k.noiseCap)
}

// narrow folds k to width w (a power of two below its own): cell i of a
// row takes the sum of the cells i, i+w, ... of the wider row, so every
// estimate stays at or above its truth.
func (k *sketch) narrow(w int) {
	old := int(k.mask + 1)
	cells := make([]aggregate, sketchRows*w)
	fps := make([]uint32, sketchRows*w)
	for r := range sketchRows {
		for i := range old {
			a := &k.cells[r*old+i]
			j := r*w + i&(w-1)
			if i < w {
				fps[j] = k.fps[r*old+i]
			} else if a.c != ([2]uint64{}) && cells[j].c != ([2]uint64{}) {
				fps[j] = 0 // two keys' counts
			} else if a.c != ([2]uint64{}) {
				fps[j] = k.fps[r*old+i]
			}
			cells[j].merge(a)
		}
	}
	k.cells, k.fps, k.mask = cells, fps, uint64(w-1)
}

// add adds counts c (c[0] of window win-1, c[1] of window win) to a.
func (a *aggregate) add(win int64, c [2]uint64) {
	a.roll(win)
	for j := range 2 {
		if k := win - 1 + int64(j) - (a.win - 1); k >= 0 && k < 2 {
			a.c[k] = satAdd(a.c[k], c[j])
		}
	}
}

// merge adds b's counts to a.
func (a *aggregate) merge(b *aggregate) { a.add(b.win, b.c) }

// sketchOf returns rule's sketch in the shard, nil if it has none; the
// caller holds sh.mu.
func (sh *shard) sketchOf(rule RuleID) *sketch {
	if int(rule) < len(sh.sketches) {
		return sh.sketches[rule]
	}
	return nil
}

// sketchFor returns rule's sketch in the shard, allocating it, or narrowing
// it to the rule's part of the room; the caller holds sh.mu.
func (sh *shard) sketchFor(s *Store, rule RuleID) *sketch {
	if int(rule) >= len(sh.sketches) {
		sh.sketches = append(sh.sketches, make([]*sketch, int(rule)+1-len(sh.sketches))...)
	}
	t := s.rules.Load()
	k := sh.sketches[rule]
	w := sketchWidth(t.share(sh.cap))
	if sh.budgeted {
		// Under a memory budget, sized to the bytes as well as to the keys:
		// at most the rule's part of a quarter of the shard's bytes, and no
		// more than the room left (the keys took the rest first).
		room := sh.maxBytes - sh.bytes()
		if k != nil {
			room += k.bytes()
		}
		w = min(w, sketchWidth(min(t.share(sh.maxBytes/4), room)/sketchCellBytes))
	}
	nc := noiseCap(t.protectOf(rule))
	if t.keepsSpent(rule) {
		nc = math.MaxUint64
	}
	switch {
	case k == nil:
		k = newSketch(w, nc)
		sh.sketches[rule] = k
		sh.sketchBytes += k.bytes()
	case int(k.mask+1) > w:
		sh.sketchBytes -= k.bytes()
		k.narrow(w)
		sh.sketchBytes += k.bytes()
	}
	k.noiseCap = nc
	return k
}

// dropSketch forgets rule's sketch; the caller holds sh.mu.
func (sh *shard) dropSketch(rule RuleID) {
	if k := sh.sketchOf(rule); k != nil {
		sh.sketchBytes -= k.bytes()
		sh.sketches[rule] = nil
	}
}

func (k *sketch) bytes() int { return len(k.cells) / sketchRows * sketchCellBytes }

// sketchCellBytes is the size of a column of a sketch: a cell and its
// fingerprint in each row.
const sketchCellBytes = sketchRows * (int(unsafe.Sizeof(aggregate{})) + 4)

// forget adds the counts of slot i, about to be evicted, to its rule's
// sketch; the caller holds sh.mu.
func (sh *shard) forget(s *Store, i int32, sl *slot) {
	c := [2]uint64{satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1])}
	if c == ([2]uint64{}) {
		return
	}
	sh.sketchFor(s, sl.rule).raise(s.hashBytes(sl.rule, sh.keyBytes(i)), sl.win, c)
}
