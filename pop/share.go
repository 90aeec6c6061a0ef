package pop

import (
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// The share partition policy.
//
// While some PoPs are unheard, a node enforcing a `share` rule admits only
// its side's share of the limit. Every side derives its share from data all
// sides already hold identically: the per-replica counts of the last window
// seen whole before the cut (window c-1, where c is the window the cut was
// noticed in). A side's share of a key is the fraction of that window's count
// owned by replicas of its PoPs, so the shares of all sides add up to one
// without any message. A key with no count in that window (first seen during
// the partition, or idle) is split by PoP count.
//
// The other side's counts of windows c-1 and c are frozen on this side (it no
// longer hears them); they are added back to the budget as they decay, so a
// side spends exactly its share of the trailing window's limit on its own
// traffic and the sides together admit at most the limit.
//
// Two mechanisms keep a side whose traffic grows from being starved for the
// whole cut: a floor (every side may use at least ShareFloor of the limit),
// and a slow adaptation: after every window of the cut in which a key's demand
// on this side was above 1.5x its pre-cut traffic and hit its share, the
// share grows by ShareStep, up to the PoP-count split. Both can let the sides
// together go over the limit (by the floor and the steps taken), which the
// simulator measures.
//
// When every PoP is heard again the node keeps enforcing shares for HealHold,
// the time the other side's counts take to arrive (anti-entropy on reconnect),
// then returns to the global view.

// maxNewShareKeys bounds the keys first seen during one partition that keep
// adaptation state.
const maxNewShareKeys = 1 << 18

// Share policy defaults.
const (
	DefaultShareFloor = 0.02
	DefaultShareStep  = 0.05
	DefaultHealHold   = 250 * time.Millisecond
)

// partition is the node's view of a partition; immutable once published
// except for the per-key adaptation state.
type partition struct {
	since    int64               // when the unheard set became non-empty
	healed   int64               // when every PoP was heard again; 0 while cut
	unheard  map[string]bool     // "region/pop"
	sideFrac float64             // PoP-count split: this side's PoPs / all PoPs
	keys     map[shareKey]*share // per-key shares snapshotted at the cut
	newKeys  *keyMap             // keys first seen during the cut
}

type keyMap struct {
	mu sync.Mutex
	m  map[shareKey]*share
}

type shareKey struct {
	rule crdt.RuleID
	key  string
}

// share is one key's budget during a partition.
type share struct {
	win          int64   // window index c the cut was noticed in
	frac         float64 // this side's share of the limit
	base         float64 // frac at the cut (before adaptation)
	hist         uint64  // this side's count in window c-1
	fresh        bool    // first seen during the cut: no history (see unsure.go)
	frozen       [2]uint64
	mu           sync.Mutex
	demandWin    int64
	demand       uint64
	hitShare     bool
	adaptedSteps int
}

// PartitionStatus is what a node knows about the current partition.
type PartitionStatus struct {
	// Partitioned is set while some PoP is unheard or shares are held after heal.
	Partitioned bool `json:"partitioned"`
	// Since is when the partition was noticed (Unix nanoseconds); 0 if none.
	Since int64 `json:"since_unix_nanos"`
	// Unheard lists the unheard PoPs ("region/pop"), sorted.
	Unheard []string `json:"unheard"`
	// SideShare is this side's PoP-count share, used for keys without history.
	SideShare float64 `json:"side_share"`
	// Rules lists, per rule, whether it enforces a share now.
	Rules []RulePartition `json:"rules"`
}

// RulePartition is one rule's partition behaviour.
type RulePartition struct {
	Rule   string `json:"rule"`
	Policy string `json:"policy"`
	// EnforcingShare is set when the rule limits this side to its share now.
	EnforcingShare bool `json:"enforcing_share"`
	// Keys is how many keys have a snapshotted traffic share.
	Keys int `json:"keys"`
	// MeanShare is the mean share of those keys (or SideShare without any)
	// while the rule enforces shares, 1 otherwise (the whole limit), as the
	// metric geolimit_rule_mean_share reports it.
	MeanShare float64 `json:"mean_share"`
}

// SetUnheard tells the node which remote PoPs ("region/pop") it does not hear
// at now; an empty list means every PoP is heard. Call it whenever the set
// changes. Report a PoP heard again only once something from it has arrived:
// the node then holds shares for HealHold while the rest of its counts come.
func (n *Node) SetUnheard(now int64, pops []string) {
	n.partMu.Lock()
	defer n.partMu.Unlock()
	cur := n.part.Load()
	if len(pops) == 0 {
		n.exclude(nil)
		if cur != nil && cur.healed == 0 {
			healed := *cur
			healed.healed = now
			n.part.Store(&healed)
		}
		return
	}
	unheard := map[string]bool{}
	for _, p := range pops {
		unheard[p] = true
	}
	if cur != nil && cur.healed == 0 && sameSet(cur.unheard, unheard) {
		return
	}
	n.exclude(unheard)
	n.part.Store(n.snapshot(now, unheard))
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
	p := n.snapshot(cur.since, cur.unheard)
	p.healed = cur.healed
	n.part.Store(p)
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func popOf(r crdt.Replica) string { return r.Region + "/" + r.PoP }

// snapshot computes every share key's share from the per-replica counts held now.
func (n *Node) snapshot(now int64, unheard map[string]bool) *partition {
	p := &partition{since: now, unheard: unheard, keys: map[shareKey]*share{}, newKeys: &keyMap{m: map[shareKey]*share{}}}
	all := map[string]bool{popOf(n.self): true}
	for _, r := range n.store.Replicas() {
		all[popOf(r)] = true
	}
	for u := range unheard {
		all[u] = true
	}
	p.sideFrac = float64(len(all)-len(unheard)) / float64(len(all))
	rs := n.rules.Load()
	type acc struct{ side, other [2]uint64 }
	sums := map[shareKey]*acc{}
	repSide := map[crdt.ReplicaID]bool{}
	n.store.Entries(n.indexFunc(rs, now), func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.OnPartition != Share || r.Scope != ScopeGlobal {
			return
		}
		c, _ := window.Split(now, r.width)
		i := e.Window - (c - 1)
		if i != 0 && i != 1 {
			return
		}
		k := shareKey{e.Rule, e.Key}
		a := sums[k]
		if a == nil {
			a = &acc{}
			sums[k] = a
		}
		onSide, ok := repSide[rep]
		if !ok {
			onSide = !unheard[popOf(n.store.Replica(rep))]
			repSide[rep] = onSide
		}
		if onSide {
			a.side[i] += e.Count
		} else {
			a.other[i] += e.Count
		}
	})
	for k, a := range sums {
		r := rs.byID[k.rule]
		c, _ := window.Split(now, r.width)
		sh := &share{win: c, frac: p.sideFrac, hist: a.side[0], frozen: a.other}
		if tot := a.side[0] + a.other[0]; tot > 0 {
			sh.frac = float64(a.side[0]) / float64(tot)
		}
		sh.frac = max(sh.frac, n.shareFloor)
		sh.base = sh.frac
		p.keys[k] = sh
	}
	return p
}

// shareLimit returns the limit a Share rule enforces for key at now, and
// whether a share applies at all.
func (n *Node) shareLimit(r *ruleState, key string, now, idx, elapsed int64) (float64, *share, bool) {
	p := n.part.Load()
	if p == nil {
		return 0, nil, false
	}
	if p.healed != 0 && now-p.healed >= n.healHold {
		n.clearHealed(p)
		return 0, nil, false
	}
	sh := p.keys[shareKey{r.id, key}]
	if sh == nil {
		sh = p.newKey(r, key, now, max(p.sideFrac, n.shareFloor))
	}
	frac := sh.adapt(idx, p.sideFrac, n.shareStep)
	frozen := 0.0
	switch idx {
	case sh.win:
		frozen = window.Estimate(sh.frozen[0], sh.frozen[1], elapsed, r.width)
	case sh.win + 1:
		frozen = window.Estimate(sh.frozen[1], 0, elapsed, r.width)
	}
	return frac*float64(r.Limit) + frozen, sh, true
}

func (p *partition) newKey(r *ruleState, key string, now int64, frac float64) *share {
	k := shareKey{r.id, key}
	p.newKeys.mu.Lock()
	defer p.newKeys.mu.Unlock()
	sh := p.newKeys.m[k]
	if sh == nil {
		c, _ := window.Split(now, r.width)
		sh = &share{win: c, frac: frac, base: frac, fresh: true}
		if len(p.newKeys.m) < maxNewShareKeys {
			p.newKeys.m[shareKey{r.id, strings.Clone(key)}] = sh
		} // else: decided with a transient share that does not adapt
	}
	return sh
}

func (n *Node) clearHealed(p *partition) {
	n.partMu.Lock()
	if n.part.Load() == p {
		n.part.Store(nil)
	}
	n.partMu.Unlock()
}

// record notes a decision's demand for the adaptation.
func (sh *share) record(idx int64, cost uint64, denied bool) {
	sh.mu.Lock()
	if idx == sh.demandWin {
		sh.demand += cost
		sh.hitShare = sh.hitShare || denied
	}
	sh.mu.Unlock()
}

// adapt closes the previous window's demand count when a new window starts
// and grows the share by step if this side's demand grew past its pre-cut
// traffic and hit the share. It returns the share.
func (sh *share) adapt(idx int64, ceiling, step float64) float64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if idx <= sh.demandWin {
		return sh.frac
	}
	if sh.demandWin != 0 && idx == sh.demandWin+1 && sh.hitShare &&
		float64(sh.demand) > 1.5*float64(max(sh.hist, 1)) && sh.frac+step <= max(ceiling, sh.base)+1e-9 {
		sh.frac += step
		sh.adaptedSteps++
	}
	sh.demandWin, sh.demand, sh.hitShare = idx, 0, false
	return sh.frac
}

// Partition returns what the node knows about the current partition at now.
func (n *Node) Partition(now int64) PartitionStatus {
	p := n.part.Load()
	rs := n.rules.Load()
	st := PartitionStatus{SideShare: 1, Unheard: []string{}, Rules: []RulePartition{}}
	active := p != nil && (p.healed == 0 || now-p.healed < n.healHold)
	if active {
		st.Partitioned, st.Since, st.SideShare = true, p.since, p.sideFrac
		for u := range p.unheard {
			st.Unheard = append(st.Unheard, u)
		}
		sort.Strings(st.Unheard)
	}
	for _, r := range rs.sorted {
		rp := RulePartition{Rule: r.Name, Policy: r.OnPartition.String(), MeanShare: 1}
		if active && r.OnPartition == Share && r.Scope == ScopeGlobal {
			rp.EnforcingShare = true
			sum := 0.0
			for k, sh := range p.keys {
				if k.rule == r.id {
					rp.Keys++
					sh.mu.Lock()
					sum += sh.frac
					sh.mu.Unlock()
				}
			}
			rp.MeanShare = st.SideShare
			if rp.Keys > 0 {
				rp.MeanShare = sum / float64(rp.Keys)
			}
			if math.IsNaN(rp.MeanShare) {
				rp.MeanShare = 0
			}
		}
		st.Rules = append(st.Rules, rp)
	}
	return st
}
