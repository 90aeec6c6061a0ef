// Region totals: what a region's voice publishes to the other regions.

package crdt

import "github.com/geolimit/geolimit/identity"

// regionalOf reports whether r's counts belong to the own region's total: a
// replica of the own region (a member, or a PoP's aggregate of any epoch)
// that is not itself a region's aggregate. The store's own counts belong to
// it too.
func (s *Store) regionalOf(r identity.Replica) bool {
	return r.Region == s.self.Region && !r.IsRegion() && r != s.self
}

// regionTotals returns the region total of windows sl.win-1, sl.win and
// sl.win+1: the own counts plus the counts of the replicas regionalOf
// accepts. The caller holds sh.mu.
func (sh *shard) regionTotals(s *Store, i int32, sl *slot) [3]uint64 {
	t := [3]uint64{sl.own[0], sl.own[1], 0}
	if sl.flags&flagSide == 0 {
		return t
	}
	reg := s.regional.Load()
	for _, e := range sh.side.get(i) {
		if !reg.has(e.rep()) {
			continue
		}
		if k := e.win(sl.win) - (sl.win - 1); k >= 0 && k < 3 {
			t[k] = satAdd(t[k], e.count)
		}
	}
	return t
}

// RegionTotal returns the region total of (rule, key) in window win: the
// store's own count plus every count of the own region's replicas (members
// and the region's PoP aggregates of every epoch), without the region
// aggregates of any region. ok is false when the key is not held or win is
// not one of its three windows. Nothing changes.
func (s *Store) RegionTotal(rule RuleID, key string, win int64) (total uint64, ok bool) {
	sh, i, ok := s.lockSlot(rule, key)
	if !ok {
		return 0, false
	}
	defer sh.mu.Unlock()
	sl := &sh.slots[i]
	k := win - (sl.win - 1)
	if k < 0 || k > 2 {
		return 0, false
	}
	return sh.regionTotals(s, i, sl)[k], true
}

// RegionPart is TotalsPart with region totals (RegionTotal) in
// FlushEntry.PoP: every live window's region total above 0 of the keys of
// part of parts. With changed, only the keys whose region total settled
// (see TotalsPart).
func (s *Store) RegionPart(nowIndex func(RuleID) int64, part, parts int, changed bool, fn func(FlushEntry)) {
	lo, hi := s.partShards(part, parts)
	s.entries(nowIndex, walkRegion, lo, hi, changed, func(_ ReplicaID, e FlushEntry) { fn(e) })
}
