package pop

// What the replication core tells the node of the PoPs it does not hear
// (SetUnheard, SetDown, SetPoPs), and the partition each unheard set
// makes (share.go).

import (
	"slices"
	"strings"

	"github.com/geolimit/geolimit/identity"
)

// SetUnheard tells the node which remote PoPs ("region/pop") it does not hear
// at now; an empty list means every PoP is heard. Call it whenever the set
// changes. Report a PoP heard again only once something from it has arrived:
// the node then holds shares for HealHold while the rest of its counts come.
func (l Link) SetUnheard(now int64, pops []string) {
	n := l.n
	n.partMu.Lock()
	defer n.partMu.Unlock()
	cur := n.part.Load()
	if len(pops) == 0 {
		n.told = nil
		n.exclude(nil)
		if cur != nil && cur.healed == 0 {
			healed := *cur
			healed.healed = now
			healed.healEnd = n.healWindowsEnd(n.rules.Load(), now)
			if cur.fresh {
				healed.healEnd = now + n.healHold // no heal window (fresh)
			}
			healed.marks = n.healMarks(cur, now)
			n.part.Store(&healed)
			n.lastPart = &healed
		}
		return
	}
	unheard, listed := map[string]bool{}, map[string]bool{}
	for _, p := range pops {
		unheard[p], listed[p] = true, true
	}
	for _, p := range pops {
		// A region's aggregate ("region/*", region voices) holds the counts
		// of every PoP of the region: unheard with all of them, it stays
		// so while any of them is. Heard again before its region's other
		// PoP, one PoP made the aggregate this side's before its counts
		// came, and a side of a two-sided surge took the whole limit for
		// its share in the heal (1.29 of it). A region whose voice went on
		// speaking (a PoP of it down or cut alone) keeps its aggregate
		// heard.
		if i := strings.IndexByte(p, '/'); i > 0 && cur != nil && cur.healed == 0 {
			if agg := p[:i] + "/" + identity.RegionPoP; cur.unheard[agg] {
				unheard[agg] = true
			}
		}
	}
	healing := cur != nil && cur.healed == 0 && subset(unheard, cur.unheard)
	if healing && len(unheard) == len(cur.unheard) {
		return
	}
	n.told = unheard
	n.exclude(unheard)
	p := n.snapshot(now, unheard, listed, n.lastPart)
	// The first unheard set, before any other PoP's count, is fresh, and so
	// is what it becomes while it lasts.
	p.fresh = (cur == nil && n.lastPart == nil && !n.heldOthers()) || (cur != nil && cur.healed == 0 && cur.fresh)
	if cur != nil && cur.healed == 0 {
		p.bound = cur.bound // the same cut, of another shape
	}
	n.part.Store(p)
	n.lastPart = p
}

// SetPoPs tells the node which remote PoPs ("region/pop") the fleet has
// as the replication core knows them: the PoP-count split of a partition
// (the share of a key without history) counts them, where a region's
// aggregate held or unheard ("region/*", region voices) would count one
// for all of its PoPs. Call it before SetUnheard whenever the set changed.
// Safe for concurrent use.
func (l Link) SetPoPs(pops []string) {
	n := l.n
	n.partMu.Lock()
	n.pops = slices.Clone(pops)
	n.partMu.Unlock()
}

// popSplit returns this side's part of the fleet's PoPs in a partition
// whose unheard PoPs are listed: the PoPs named by this node, the store's
// replicas, listed and SetPoPs, where a region's aggregate counts as one
// PoP only while none of the region's PoPs is named (with region voices a
// node holds another region's counts as its aggregate: a fleet of two
// regions of two PoPs each and a third of one, cut from the start, split
// 0.6 / 0.14 where by PoPs it is 0.8 / 0.2). The caller holds n.partMu.
func (n *Node) popSplit(listed map[string]bool) float64 {
	all := map[string]bool{popOf(n.self): true}
	for _, r := range n.store.Replicas() {
		all[popOf(r)] = true
	}
	for u := range listed {
		all[u] = true
	}
	for _, u := range n.pops {
		all[u] = true
	}
	named := map[string]bool{} // regions with a PoP named
	for u := range all {
		if region, pop, ok := strings.Cut(u, "/"); ok && pop != identity.RegionPoP {
			named[region] = true
		}
	}
	var pops, cut int
	for u := range all {
		if region, pop, _ := strings.Cut(u, "/"); pop == identity.RegionPoP && named[region] {
			continue
		}
		pops++
		if listed[u] {
			cut++
		}
	}
	return float64(pops-cut) / float64(pops)
}

// heldOthers reports whether the store holds a replica of another PoP.
func (n *Node) heldOthers() bool {
	self := popOf(n.self)
	for _, r := range n.store.Replicas() {
		if popOf(r) != self {
			return true
		}
	}
	return false
}

// SetDown tells the node which remote PoPs ("region/pop") it takes for
// down rather than cut off at now: silent, but their last silence ended
// in a restart. Their counts are frozen like an unheard PoP's, so the
// near-limit allowance leaves them out as it does those of SetUnheard's;
// the share policy holds this side to no share for them, as a PoP that
// is down spends nothing. Call it whenever the set changes. Safe for
// concurrent use.
func (l Link) SetDown(now int64, pops []string) {
	n := l.n
	n.partMu.Lock()
	defer n.partMu.Unlock()
	n.down = nil
	if len(pops) > 0 {
		n.down = map[string]bool{}
		for _, p := range pops {
			n.down[p] = true
		}
	}
	n.exclude(n.told)
}

// resnapshot recomputes the shares of a partition in force after the rules
// changed (a rule ID may now name another rule). The caller holds n.mu.
func (n *Node) resnapshot() {
	n.partMu.Lock()
	defer n.partMu.Unlock()
	cur := n.part.Load()
	if cur == nil {
		return
	}
	p := n.snapshot(cur.since, cur.unheard, cur.listed, nil)
	p.healed, p.fresh, p.bound = cur.healed, cur.fresh, cur.bound
	n.part.Store(p)
	n.lastPart = p
}

// subset reports whether every member of a is in b.
func subset(a, b map[string]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func popOf(r identity.Replica) string { return r.Region + "/" + r.PoP }
