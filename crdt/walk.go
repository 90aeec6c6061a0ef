package crdt

import (
	"sync"
)

// Own calls fn for every own count in a live window: the anti-entropy set that
// repairs lost deltas and teaches joiners. nowIndex returns the current window
// index of a rule (it runs under a shard lock). Like Flush, Own copies under
// each shard's lock and calls fn after releasing it.
func (s *Store) Own(nowIndex func(RuleID) int64, fn func(FlushEntry)) {
	s.OwnPart(nowIndex, 0, 1, false, fn)
}

// OwnPart is Own over one part of the store: the keys of the shards of part
// (0 <= part < parts) when the shards are cut in parts runs of about equal
// length. The parts 0 to parts-1 of one parts hold every key once, so a
// caller can spread a walk of a large store over time (Parts).
//
// With changed, only the keys whose PoP total settled are walked, as
// TotalsPart's walk with changed sees them (OwnPart's starts no period).
func (s *Store) OwnPart(nowIndex func(RuleID) int64, part, parts int, changed bool, fn func(FlushEntry)) {
	lo, hi := s.partShards(part, parts)
	s.entries(nowIndex, walkOwn, lo, hi, changed, func(_ ReplicaID, e FlushEntry) { fn(e) })
}

// partShards returns the shards [lo, hi) of part of parts.
func (s *Store) partShards(part, parts int) (lo, hi int) {
	if parts < 1 || part < 0 || part >= parts {
		return 0, 0
	}
	n := len(s.shards)
	return part * n / parts, (part + 1) * n / parts
}

// Parts returns how many parts (OwnPart, TotalsPart) a walk of the store is
// best cut in for parts of about perPart keys each: at least 1, at most the
// number of shards.
func (s *Store) Parts(perPart int) int {
	keys := 0
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		keys += sh.used
		sh.mu.Unlock()
	}
	if perPart < 1 {
		return 1
	}
	return min(max((keys+perPart-1)/perPart, 1), len(s.shards))
}

// Entries calls fn for every per-replica count in a live window, own and
// remote: the full state a joining or restarted peer needs. Count is the
// reported replica's count and PoP the store's PoP total of that window.
// nowIndex runs under a shard lock; fn runs after it is released (see Own).
func (s *Store) Entries(nowIndex func(RuleID) int64, fn func(ReplicaID, FlushEntry)) {
	s.entries(nowIndex, walkAll, 0, len(s.shards), false, fn)
}

// entryRec is one count copied out by entries under its shard's lock; slot
// indexes the record of the slot in a shard's walk whose key it has.
type entryRec struct {
	win   int64
	count uint64
	pop   uint64
	slot  int32
	rep   ReplicaID
	rule  RuleID
}

// What entries walks.
const (
	walkOwn    = iota // the own counts (Own)
	walkAll           // the own and the other replicas' counts (Entries)
	walkTotals        // the PoP totals (Totals)
	walkRegion        // the region totals (RegionPart)
)

// entries is Own, Entries and Totals over the shards [lo, hi). Under each
// shard's lock it copies counts and key bytes into reused buffers, sized
// before locking, so that a walk of a large store seldom holds a lock across
// an allocation (which may assist the garbage collector) and never across a
// callback; a lock is held for one shard's copy at a time.
func (s *Store) entries(nowIndex func(RuleID) int64, walk, lo, hi int, onlyChanged bool, fn func(ReplicaID, FlushEntry)) {
	period, since := markAEPoP, markAEPoP0 // what a change of the walked counts marks
	if walk == walkRegion {
		period, since = markAERegion, markAERegion0
	}
	changed := OwnChanged
	if walk == walkTotals || walk == walkRegion {
		changed = PoPChanged
	}
	// The copies are scratch, kept between walks: a part of an
	// anti-entropy round walks a few shards every few milliseconds, and
	// buffers sized afresh for a shard's every key (most of which, on most
	// nodes, are other replicas' and give no record) were most of the
	// round's garbage.
	ws := walkScratch.Get().(*walkBufs)
	defer walkScratch.Put(ws)
	recs, keys, kb := ws.recs[:0], ws.keys[:0], ws.kb[:0] // keys: a slot's key, in kb
	defer func() { ws.recs, ws.keys, ws.kb = recs[:0], keys[:0], kb[:0] }()
	if lo < hi && cap(recs) == 0 {
		// A new scratch's first copy is sized from its first shard's keys:
		// a key gives up to three records (Entries: more), and most keys
		// are short.
		sh := &s.shards[lo]
		sh.mu.Lock()
		n := sh.used
		sh.mu.Unlock()
		recs, keys, kb = make([]entryRec, 0, 3*n), make([]walkKey, 0, n), make([]byte, 0, 16*n)
	}
	for si := lo; si < hi; si++ {
		sh := &s.shards[si]
		// Shards hold about as many keys each: room for twice the last
		// shard's copy, made before locking, keeps growth out of the lock.
		if cap(recs) < 2*len(recs) {
			recs = make([]entryRec, 0, 2*len(recs))
		}
		if cap(keys) < 2*len(keys) {
			keys = make([]walkKey, 0, 2*len(keys))
		}
		if cap(kb) < 2*len(kb) {
			kb = make([]byte, 0, 2*len(kb))
		}
		recs, keys, kb = recs[:0], keys[:0], kb[:0]
		sh.mu.Lock()
		for i := range sh.slots {
			sl := &sh.slots[i]
			if sl.flags&flagLive == 0 {
				continue
			}
			cur := nowIndex(sl.rule)
			if sl.win+1 < cur-1 {
				continue // nothing live
			}
			if onlyChanged {
				m := sl.mark & period
				if walk != walkOwn {
					// A new period: each period's changes move one
					// period back, the oldest are forgotten.
					sl.mark = sl.mark&^period | m<<1&period
				}
				if m&since != 0 || m == 0 {
					continue // still changing, or settled long ago
				}
			}
			at := len(recs)
			var pop [3]uint64
			if walk == walkRegion {
				pop = sh.regionTotals(s, int32(i), sl)
			} else {
				pop = sh.popTotals(int32(i), sl)
			}
			if walk == walkTotals || walk == walkRegion {
				for k, p := range pop {
					if w := sl.win - 1 + int64(k); p > 0 && w >= cur-1 {
						var c uint64
						if k < 2 {
							c = sl.own[k]
						}
						recs = append(recs, entryRec{win: w, count: c, pop: p, slot: int32(len(keys)), rep: SelfID, rule: sl.rule})
					}
				}
			} else {
				for k, c := range sl.own {
					if w := sl.win - 1 + int64(k); c > 0 && w >= cur-1 {
						recs = append(recs, entryRec{win: w, count: c, pop: pop[k], slot: int32(len(keys)), rep: SelfID, rule: sl.rule})
					}
				}
			}
			if walk == walkAll && sl.flags&flagSide != 0 {
				for _, e := range sh.side.get(int32(i)) {
					if w := e.win(sl.win); w >= cur-1 {
						var p uint64
						if k := w - (sl.win - 1); k >= 0 && k < 3 {
							p = pop[k]
						}
						recs = append(recs, entryRec{win: w, count: e.count, pop: p, slot: int32(len(keys)), rep: e.rep(), rule: sl.rule})
					}
				}
			}
			if len(recs) > at {
				k := sh.keyBytes(int32(i))
				keys = append(keys, walkKey{off: uint32(len(kb)), len: uint32(len(k))})
				kb = append(kb, k...)
			}
		}
		sh.mu.Unlock()
		// The anti-entropy walks' keys live as long as their batch: one
		// string holds a shard's. Entries' keys may be kept (a partition's
		// shares keep some): each has its own.
		joined := ""
		if walk != walkAll {
			joined = string(kb)
		}
		key, last := "", int32(-1)
		for _, r := range recs {
			if r.slot != last {
				k := keys[r.slot]
				if walk == walkAll {
					key = string(kb[k.off : k.off+k.len])
				} else {
					key = joined[k.off : k.off+k.len]
				}
				last = r.slot
			}
			fn(r.rep, FlushEntry{Rule: r.rule, Key: key, Window: r.win, Count: r.count, PoP: r.pop, Changed: changed})
		}
	}
}

// walkKey is where entries copied a slot's key in its key buffer.
type walkKey struct{ off, len uint32 }

// walkBufs are the scratch buffers of a walk (entries); none holds a
// pointer, so a pooled one keeps nothing alive.
type walkBufs struct {
	recs []entryRec
	keys []walkKey
	kb   []byte
}

var walkScratch = sync.Pool{New: func() any { return new(walkBufs) }}

// Totals calls fn for every PoP total above 0 in a live window, with Count
// the own count of that window: the anti-entropy set of a PoP's aggregate.
// nowIndex returns the current window index of a rule (it runs under a shard
// lock). Like Flush, Totals copies under each shard's lock and calls fn after
// releasing it, so fn may block or call into the store.
func (s *Store) Totals(nowIndex func(RuleID) int64, fn func(FlushEntry)) {
	s.TotalsPart(nowIndex, 0, 1, false, fn)
}

// TotalsPart is Totals over one part of the store (see OwnPart).
//
// With changed, only the keys whose PoP total (or own count) settled are
// walked: it did not change since the last walk with changed over them,
// and did in one of the two periods before it. The walk starts a new
// period of the keys it walks. A periodic anti-entropy round then re-sends
// a key's final total in the two rounds after it settled; a key that goes
// on changing is repaired by its next message instead (counts are
// absolute), and one that did not change for three rounds costs nothing.
func (s *Store) TotalsPart(nowIndex func(RuleID) int64, part, parts int, changed bool, fn func(FlushEntry)) {
	lo, hi := s.partShards(part, parts)
	s.entries(nowIndex, walkTotals, lo, hi, changed, func(_ ReplicaID, e FlushEntry) { fn(e) })
}
