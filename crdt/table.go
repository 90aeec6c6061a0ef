package crdt

import (
	"encoding/binary"
	"hash/maphash"
	"math"

	"github.com/cespare/xxhash/v2"
)

// A shard's table.
//
// The slots are the buckets of an open-addressing hash table (linear
// probing, backward-shift deletion). A key of up to inlineKeyLen bytes is
// stored in its slot; a longer one in the shard's arena, one byte slice
// with no pointers, the slot holding its offset and length (longRef), so
// that the GC scans nothing and a long key costs its bytes. Removed long
// keys leave dead bytes in the arena, reclaimed once they are half of it.
//
// The table grows by half when it is three quarters full and shrinks to
// half full when a sweep leaves it less than a quarter full, so the memory
// of keys that expired comes back; the side structures keyed by position
// are rebuilt with it. A large table lives outside the Go heap (offheap.go).

// initialSlots is a new shard's capacity.
const initialSlots = 16

// maxLoad is the fill ratio (in eighths) at which a shard grows; minLoad
// the one below which a sweep shrinks it, to half full.
const (
	maxLoad = 6
	minLoad = 2
)

// minArenaDead is how many dead arena bytes are never worth compacting.
const minArenaDead = 4 << 10

// longRef returns where slot sl's long key lies in its shard's arena.
func (sl *slot) longRef() (off, n int) {
	return int(binary.LittleEndian.Uint32(sl.kb[:4])), int(binary.LittleEndian.Uint16(sl.kb[4:6]))
}

func (sl *slot) setLongRef(off, n int) {
	binary.LittleEndian.PutUint32(sl.kb[:4], uint32(off))
	binary.LittleEndian.PutUint16(sl.kb[4:6], uint16(n))
}

// keyBytes returns slot i's key, aliasing the slot or the arena: valid
// until the shard changes. The caller holds sh.mu.
func (sh *shard) keyBytes(i int32) []byte {
	sl := &sh.slots[i]
	if sl.klen == longKey {
		off, n := sl.longRef()
		return sh.arena[off : off+n : off+n]
	}
	return sl.kb[:sl.klen:sl.klen]
}

// keyOf returns slot i's key; the caller holds sh.mu.
func (sh *shard) keyOf(i int32) string { return string(sh.keyBytes(i)) }

// hashBytes is hash for a key held as bytes.
func (s *Store) hashBytes(rule RuleID, key []byte) uint64 {
	if s.fixedSeed == 0 {
		return maphash.Bytes(s.seed, key) ^ ruleMix(rule)
	}
	return mix64(xxhash.Sum64(key)^s.fixedSeed) ^ ruleMix(rule)
}

// home returns the first position of hash h in a table of n slots.
func home(h uint64, n int) int { return int((h & 0xffffffff) * uint64(n) >> 32) }

// find returns the position of (rule, key).
func (sh *shard) find(h uint64, rule RuleID, key string) (int32, bool) {
	n := len(sh.slots)
	for p := home(h, n); ; {
		sl := &sh.slots[p]
		if sl.flags&flagLive == 0 {
			return 0, false
		}
		if sl.rule == rule {
			if sl.klen == longKey {
				if off, kn := sl.longRef(); kn == len(key) && string(sh.arena[off:off+kn]) == key {
					return int32(p), true
				}
			} else if int(sl.klen) == len(key) && string(sl.kb[:sl.klen]) == key {
				return int32(p), true
			}
		}
		if p++; p == n {
			p = 0
		}
	}
}

// insert adds a new (rule, key) with window nowIndex, making room if the shard
// is full; the caller holds sh.mu and knows the key is absent. It returns the
// key's position.
func (sh *shard) insert(s *Store, h uint64, rule RuleID, key string, nowIndex int64) (int32, bool) {
	for int(rule) >= len(sh.now) {
		sh.now = append(sh.now, math.MinInt64)
		sh.count = append(sh.count, 0)
	}
	if nowIndex > sh.now[rule] {
		sh.now[rule] = nowIndex
	}
	if (sh.used >= sh.cap || !sh.roomFor(sh.keyGrowth(len(key)))) && !sh.evictFor(s, rule) {
		s.overflow.Add(1)
		return 0, false
	}
	if (sh.used+1)*8 > len(sh.slots)*maxLoad {
		sh.rehash(s, len(sh.slots)+len(sh.slots)/2)
	}
	p := sh.free(h)
	sl := &sh.slots[p]
	*sl = slot{win: nowIndex, rule: rule, flags: flagLive}
	if k := sh.sketchOf(rule); k != nil {
		sl.other = k.estimate(h, nowIndex)
	}
	if len(key) <= inlineKeyLen {
		sl.klen = uint8(len(key))
		copy(sl.kb[:], key)
	} else {
		sl.klen = longKey
		sl.setLongRef(len(sh.arena), len(key))
		sh.arena = append(sh.arena, key...)
	}
	sh.used++
	sh.count[rule]++
	return p, true
}

// free returns the first empty position on h's probe run.
func (sh *shard) free(h uint64) int32 {
	n := len(sh.slots)
	p := home(h, n)
	for sh.slots[p].flags&flagLive != 0 {
		if p++; p == n {
			p = 0
		}
	}
	return int32(p)
}

// rehash moves every slot into a table of n slots (n > used), with a
// compacted arena and side structures sized for what they hold.
func (sh *shard) rehash(s *Store, n int) {
	old, oldArena, oldSide, oldHot := sh.slots, sh.arena, sh.side, sh.hot
	oldMap := sh.setSlots(n)
	sh.arena = make([]byte, 0, len(oldArena)-sh.arenaDead)
	sh.arenaDead = 0
	sh.side = oldSide.rebuilt(n)
	sh.noteSideBase()
	sh.hot = make(map[int32]int32, len(oldHot))
	if cap(sh.dirty) > 2*sh.used+64 {
		sh.dirty = make([]int32, 0, sh.used)
	} else {
		sh.dirty = sh.dirty[:0]
	}
	// The records of recent sends follow their slots (seedHot reads them
	// by position); those made below (resent) are at the new positions.
	sentLo, sentHi := sh.sentKeep, len(sh.sent)
	var moved []int32
	if sentHi > sentLo {
		moved = make([]int32, len(old))
	}
	for i := range old {
		sl := &old[i]
		if sl.flags&flagLive == 0 {
			continue
		}
		var key []byte
		if sl.klen == longKey {
			off, kn := sl.longRef()
			key = oldArena[off : off+kn]
		} else {
			key = sl.kb[:sl.klen]
		}
		p := sh.free(s.hashBytes(sl.rule, key))
		if moved != nil {
			moved[i] = p + 1
		}
		nsl := &sh.slots[p]
		*nsl = *sl
		if sl.klen == longKey {
			nsl.setLongRef(len(sh.arena), len(key))
			sh.arena = append(sh.arena, key...)
		}
		if sl.flags&flagSide != 0 {
			sh.side.set(p, oldSide.get(int32(i)), n)
		}
		if sl.flags&flagHot != 0 {
			k := oldHot[int32(i)]
			sh.hot[p] = k
			sh.hotSlab[k].pos = p
		}
		if sl.flags&flagInDirty != 0 {
			sh.dirty = append(sh.dirty, p)
			sh.noteWork()
		}
		if sl.flags&flagRecent != 0 {
			sh.resent(s, p, nsl)
		}
	}
	for k := sentLo; k < sentHi; k++ {
		if r := &sh.sent[k]; r.pos >= 0 && int(r.pos) < len(moved) {
			r.pos = moved[r.pos] - 1 // -1: the slot was gone
		}
	}
	oldMap.free()
}

// shrink makes the table half full if it is less than a quarter full; the
// caller holds sh.mu.
func (sh *shard) shrink(s *Store) {
	if len(sh.slots) > initialSlots && sh.used*8 < len(sh.slots)*minLoad {
		sh.rehash(s, max(initialSlots, 2*sh.used))
	}
	if cap(sh.sent) > 2*(len(sh.sent)-sh.sentKeep)+64 {
		sh.sent, sh.sentHead, sh.sentKeep = append([]sentRec(nil), sh.sent[sh.sentKeep:]...), sh.sentHead-sh.sentKeep, 0
	}
}

// remove deletes the slot at position p; the caller holds sh.mu. Later
// slots of the probe run shift back so every run stays unbroken.
func (sh *shard) remove(s *Store, p int32) {
	sl := &sh.slots[p]
	sh.count[sl.rule]--
	sh.used--
	if sl.klen == longKey {
		_, kn := sl.longRef()
		sh.arenaDead += kn
	}
	sh.side.del(p)
	if sl.flags&flagHot != 0 {
		sh.dropHot(p, sl)
	}
	*sl = slot{}
	n := int32(len(sh.slots))
	for j := p; ; {
		if j++; j == n {
			j = 0
		}
		nx := &sh.slots[j]
		if nx.flags&flagLive == 0 {
			break
		}
		h := int32(home(s.hashBytes(nx.rule, sh.keyBytes(j)), int(n)))
		// nx may move to the hole p unless its home lies cyclically in (p, j].
		if (p < j && (h <= p || h > j)) || (p > j && h <= p && h > j) {
			sh.move(s, j, p)
			p = j
		}
	}
	if sh.arenaDead > minArenaDead && 2*sh.arenaDead > len(sh.arena) {
		sh.compactArena()
	}
}

// compactArena drops the arena's dead bytes; the caller holds sh.mu.
func (sh *shard) compactArena() {
	arena := make([]byte, 0, len(sh.arena)-sh.arenaDead)
	for i := range sh.slots {
		sl := &sh.slots[i]
		if sl.flags&flagLive == 0 || sl.klen != longKey {
			continue
		}
		off, kn := sl.longRef()
		sl.setLongRef(len(arena), kn)
		arena = append(arena, sh.arena[off:off+kn]...)
	}
	sh.arena, sh.arenaDead = arena, 0
}

// move moves the slot at position from to the empty position to.
func (sh *shard) move(s *Store, from, to int32) {
	sl := sh.slots[from]
	sh.slots[to] = sl
	sh.slots[from] = slot{}
	if sl.flags&flagSide != 0 {
		sh.side.move(from, to)
	}
	if sl.flags&flagHot != 0 {
		sh.moveHot(from, to)
	}
	if sl.flags&flagInDirty != 0 {
		sh.dirty = append(sh.dirty, to)
		sh.noteWork()
	}
	if sl.flags&flagRecent != 0 {
		sh.resent(s, to, &sh.slots[to])
	}
}
