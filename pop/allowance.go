package pop

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
)

// The near-limit allowance.
//
// A node's admits reach the other replicas only after the replication lag,
// and until then every replica decides on headroom the others may be
// spending too: at a key many times over its limit the fleet overshoots by
// the rate times the lag. Far from a limit nodes decide freely, as the
// estimate alone says. Near it, each node may keep unseen (admitted but not
// yet held by the others) at most its share of the headroom the others
// already know of, its share being its part of the key's counts that every
// replica holds alike (its PoP's part, then its own part of the PoP's, each
// at least an equal split); a node with nothing unseen may always admit one
// request. The unseen admits of the whole fleet then add
// up to about that headroom. The replication layer tells the node the lag
// and the number of replicas (SetAllowance); crdt.AdmitSplit has the maths.
//
// The counts of PoPs counted as partitioned (SetUnheard) are frozen and are
// left out of every share, so during a cut a side splits its headroom among
// its own nodes: keep goes on with the local view as before, and share
// splits the side's share.

// SetAllowance sets the near-limit allowance of the rules of scope (pop or
// global; node-scope rules are never split). A single replica or a zero
// Horizon turns it off (a node alone, or counts seen at once).
func (l Link) SetAllowance(scope Scope, a Allowance) {
	n := l.n
	if scope != ScopePoP && scope != ScopeGlobal {
		return
	}
	if a.Replicas() < 2 || a.Horizon <= 0 {
		n.allow[scope].Store(nil)
		return
	}
	next := crdt.Allowance{Horizon: int64(a.Horizon), Members: max(a.Members, 1), PoPs: max(a.PoPs, 1), Reach: int64(a.Reach)}
	if cur := n.allow[scope].Load(); cur != nil && *cur == next {
		return // unchanged: the replication core sets it after every peer check
	}
	n.allow[scope].Store(&next)
}

// AllowanceOf returns the allowance of scope in force (the zero value when
// off).
func (l Link) AllowanceOf(scope Scope) Allowance {
	n := l.n
	if scope > ScopeGlobal {
		return Allowance{}
	}
	a := n.allow[scope].Load()
	if a == nil {
		return Allowance{}
	}
	return Allowance{Horizon: time.Duration(a.Horizon), Members: a.Members, PoPs: a.PoPs, Reach: time.Duration(a.Reach)}
}

// flushHorizon is the longest horizon in force: what a flush's records of
// keys near their limit must cover.
func (n *Node) flushHorizon() int64 {
	var h int64
	for s := ScopePoP; s <= ScopeGlobal; s++ {
		if a := n.allow[s].Load(); a != nil {
			h = max(h, a.Horizon)
		}
	}
	return h
}

// exclude leaves the counts of the unheard PoPs and of those taken for
// down (SetDown) out of the allowance's shares (none when both are empty).
// The caller holds n.partMu.
func (n *Node) exclude(unheard map[string]bool) {
	down := n.down
	if len(unheard) == 0 && len(down) == 0 {
		n.store.SetExcluded(nil)
		return
	}
	n.store.SetExcluded(func(r identity.Replica) bool { p := popOf(r); return unheard[p] || down[p] })
}
