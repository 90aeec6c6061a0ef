package crdt

const (
	flagSide uint8 = 1 << iota
	flagInDirty
	flagLive
	flagHot // the key has an entry in shard.hot (see allowance.go)
	// flagRecent: a flush sent the own counts within the allowance's
	// horizon, so the other replicas may not hold them yet (see sentRec).
	flagRecent

	// The top three bits of flags hold half of the slot's sentSeq.
	sentSeqShift = 5
)

// inlineKeyLen is the longest key stored inside its slot (IPv4 addresses fit);
// longer keys live in their shard's arena (see table.go).
const inlineKeyLen = 18

// longKey marks a slot whose key is in its shard's arena.
const longKey = 0xff

// slot is one (rule, key): exactly one cache line, no pointers (the GC never
// scans the slab), holding everything a decision reads.
type slot struct {
	win   int64     // index of the key's current window
	own   [2]uint64 // this replica's counts: [0] window win-1, [1] window win
	other [2]uint64 // sum over other replicas, same layout
	rule  RuleID
	klen  uint8 // key length, or longKey
	dirty uint8 // what changed since the last flush: dirtyOwn0 ... dirtyPoP2; see sentSeq
	flags uint8
	mark  uint8 // markDenied0, markDenied1: see evict.go
	kb    [inlineKeyLen]byte
}

// Bits of slot.dirty.
const (
	// dirtyOwn0 and dirtyOwn1: own[0] and own[1] changed.
	dirtyOwn0 uint8 = 1 << iota
	dirtyOwn1
	// dirtyPoP0, 1 and 2: the PoP total of window win-1, win and win+1
	// changed (a member's clock may run a window ahead of the key's).
	dirtyPoP0
	dirtyPoP1
	dirtyPoP2

	dirtyOwn = dirtyOwn0 | dirtyOwn1
	dirtyAll = dirtyOwn | dirtyPoP0 | dirtyPoP1 | dirtyPoP2
)

// shiftDirty returns dirty bits of a slot moved on by d > 0 windows (the
// bits above dirtyAll are kept).
func shiftDirty(dirty uint8, d int64) uint8 {
	if d >= 3 {
		return dirty &^ dirtyAll
	}
	own, pop := dirty&dirtyOwn, dirty>>2&7
	return own>>d | (pop>>d)<<2 | dirty&^dirtyAll
}

// sentSeq returns the sequence number, modulo 64, of the flush that last
// sent the slot's own counts: three bits above dirtyAll in dirty, three
// above sentSeqShift in flags.
func (sl *slot) sentSeq() uint8 { return sl.dirty>>5 | (sl.flags>>sentSeqShift)<<3 }

func (sl *slot) setSentSeq(seq uint8) {
	sl.dirty = sl.dirty&dirtyAll | (seq&7)<<5
	sl.flags = sl.flags&^(7<<sentSeqShift) | (seq>>3&7)<<sentSeqShift
}

func (sl *slot) total() uint64 {
	return satAdd(satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1]))
}
