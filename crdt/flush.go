package crdt

// FlushEntry is one (rule, key, window) of this store handed out by Flush,
// Own, Entries or Totals.
type FlushEntry struct {
	Rule   RuleID
	Key    string
	Window int64
	// Count is this replica's own count (Entries: the reported replica's).
	Count uint64
	// PoP is the PoP total: the own count plus the member replicas' counts of
	// this window.
	PoP uint64
	// Changed says which of Count and PoP changed since the last Flush (Flush
	// only); Own and Entries set OwnChanged, Totals PoPChanged.
	Changed Changed
}

// Changed is a set of FlushEntry values that changed.
type Changed uint8

// Changed bits.
const (
	// OwnChanged: the own count (FlushEntry.Count) changed.
	OwnChanged Changed = 1 << iota
	// PoPChanged: the PoP total (FlushEntry.PoP) changed.
	PoPChanged
)

// Flush calls fn for each (rule, key, window) whose own count or PoP total
// changed since the last Flush, and clears the change marks. An own count
// changes by Admit, which changes the PoP total as well; the PoP total also
// changes when Merge raises a member's count, so an entry may have only
// PoPChanged, with an own count of 0. Changes to counts of 0 are not
// reported. The windows are the key's previous and current windows, and the
// one after when a member's clock runs ahead.
//
// Under each shard's lock Flush only copies the changed counts out; fn runs
// after the lock is released, so building deltas never holds up decisions. Flush
// is safe for concurrent use, but concurrent Flush calls are serialised.
func (s *Store) Flush(fn func(FlushEntry)) { s.flush(0, 0, fn) }

// FlushAt is Flush at time at (the clock of AdmitSplit's times): it also
// records, for the keys near their limit, the own counts this flush sends,
// which the near-limit allowance counts as held by the other replicas once
// its horizon has passed. horizon is the allowance's (see Allowance); it
// only says which recorded flushes later decisions may still need.
func (s *Store) FlushAt(at, horizon int64, fn func(FlushEntry)) { s.flush(at, horizon, fn) }

// flushGapDecay is the divisor of the decay of the mean time between
// flushes per flush (see pooledRoom).
const flushGapDecay = 8

func (s *Store) flush(at, horizon int64, fn func(FlushEntry)) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if at != 0 {
		if last := s.lastFlush.Load(); last != 0 && at > last {
			g := s.flushGap.Load()
			if g == 0 {
				g = at - last
			}
			s.flushGap.Store(g + (at-last-g)/flushGapDecay)
		}
		s.lastFlush.Store(at)
		s.flushSeq++
	}
	for si := range s.shards {
		sh := &s.shards[si]
		if !sh.work.Load() {
			continue // a change made meanwhile goes with the next flush
		}
		recs, keys := s.flushBuf[:0], s.flushKeys[:0]
		sh.mu.Lock()
		for _, i := range sh.dirty {
			sl := &sh.slots[i]
			if sl.flags&flagInDirty == 0 {
				continue // evicted, or already flushed
			}
			sl.flags &^= flagInDirty
			if at != 0 {
				if sl.flags&flagHot != 0 {
					sh.hotSlab[sh.hot[i]].push(at, horizon, sl.win, sl.own)
				}
				if sl.dirty&dirtyOwn != 0 {
					sh.sentNow(s, at, s.flushSeq, i, sl)
				}
			}
			if sl.dirty&dirtyAll == 0 {
				continue
			}
			kb := sh.keyBytes(i)
			recs = append(recs, flushRec{rule: sl.rule, koff: uint32(len(keys)), klen: uint32(len(kb)),
				win: sl.win, own: sl.own, pop: sh.popTotals(i, sl), dirty: sl.dirty})
			keys = append(keys, kb...)
			sl.dirty &^= dirtyAll
		}
		sh.dirty = trimmed(sh.dirty)
		if at != 0 {
			sh.expireSent(s, at-horizon, at-2*horizon)
		}
		sh.work.Store(len(sh.dirty) > 0 || sh.sentKeep < len(sh.sent))
		sh.mu.Unlock()
		all := string(keys) // one allocation for the keys of the shard's entries
		for k := range recs {
			r := &recs[k]
			key := all[r.koff : r.koff+r.klen]
			for w := range r.pop {
				var e FlushEntry
				if w < 2 && r.dirty&(dirtyOwn0<<w) != 0 && r.own[w] > 0 {
					e.Changed |= OwnChanged
				}
				if r.dirty&(dirtyPoP0<<w) != 0 && r.pop[w] > 0 {
					e.Changed |= PoPChanged
				}
				if e.Changed == 0 {
					continue
				}
				e.Rule, e.Key, e.Window, e.PoP = r.rule, key, r.win-1+int64(w), r.pop[w]
				if w < 2 {
					e.Count = r.own[w]
				}
				fn(e)
			}
		}
		s.flushBuf, s.flushKeys = trimmed(recs), trimmed(keys)
	}
}

// trimmed returns buf emptied, or nil when its capacity is four times what
// it last held and more than a little: a burst of changes does not keep its
// buffers for ever.
func trimmed[T any](buf []T) []T {
	if cap(buf) > 4*len(buf)+1024 {
		return nil
	}
	return buf[:0]
}

// flushRec is a changed slot copied out under its shard's lock.
type flushRec struct {
	win   int64
	own   [2]uint64
	pop   [3]uint64
	koff  uint32 // the key, in the flush's key buffer
	klen  uint32
	rule  RuleID
	dirty uint8
}

// Pending returns about how many keys changed since the last Flush (an upper
// bound: a key evicted after its change still counts until the next Flush).
func (s *Store) Pending() int {
	n := 0
	for si := range s.shards {
		sh := &s.shards[si]
		if !sh.work.Load() {
			continue
		}
		sh.mu.Lock()
		n += len(sh.dirty)
		sh.mu.Unlock()
	}
	return n
}
