package pop

import (
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
// A side follows its demand (share_demand.go, share_side.go,
// share_side_asked.go): when its demand grows well past what it was at the
// cut while its share binds, and its total over all keys grew with it (or
// its side's, as what the side's replicas were asked tells it), it takes
// the demand for traffic that moved to it from the other side (a failover:
// a dead PoP looks exactly like a partitioned one) and grows its share to
// its part of the fleet's demand; a side whose demand fell shrinks its
// share the same way, so the sides still add up to the limit when traffic
// moves between them. A floor (every side may use at least ShareFloor of
// the limit) keeps a side from being shut out.
//
// When the unheard set changes during a partition (a cut that changes
// shape, with no heal long enough to see a window whole in between), the
// shares are derived again from the same per-PoP counts of the window seen
// whole before the first cut, which every side holds alike, so the sides of
// the new cut still add up to the limit although their views of the cut's
// windows differ.
//
// When every PoP is heard again the node keeps enforcing shares for HealHold,
// the time the other side's counts take to arrive (anti-entropy on reconnect),
// then returns to the global view; in the rest of the window the hold ends
// in, a key the side refused there before the heal may not spend the room
// the heal opens in a burst the next window's estimate would misjudge
// (share_heal.go).

// maxNewShareKeys bounds the keys first seen during one partition that keep
// adaptation state.
const maxNewShareKeys = 1 << 18

// Share policy defaults.
const (
	DefaultShareFloor = 0.02
	DefaultShareStep  = 0.25
	DefaultHealHold   = 250 * time.Millisecond
	// DefaultShareRise is Rule.ShareRise's default: with it a failover of a
	// fifth to a third of the demand is given 0.80 of what a central
	// limiter admits, and every key rising 1.3 times on both sides of a cut
	// goes 1.21-1.24 times over its limit (keep: 2 times).
	DefaultShareRise = 0.2
)

// partition is the node's view of a partition; immutable once published
// except for the per-key adaptation state.
type partition struct {
	since    int64               // when the unheard set became non-empty
	healed   int64               // when every PoP was heard again; 0 while cut
	healEnd  int64               // when the windows the heal ends in close (share_heal.go)
	marks    map[shareKey]uint64 // this side's counts of the heal's windows at the heal
	unheard  map[string]bool     // "region/pop", and "region/*" of their regions
	listed   map[string]bool     // those SetUnheard was told
	sideFrac float64             // PoP-count split: this side's PoPs / all PoPs
	keys     map[shareKey]*share // per-key shares snapshotted at the cut
	newKeys  *keyMap             // keys first seen during the cut
	// sides holds, per share rule, this node's demand over all its keys
	// (share_side.go).
	sides map[crdt.RuleID]*sideDemand
	// others tells the replicas of the unheard PoPs (healHeld).
	others *otherReplicas
	// refused and asked hold, per share rule, each PoP's refused cost and
	// what it was asked (at least what it admitted) in the window its
	// keys' bases were taken from (asked.go), when known.
	refused, asked map[crdt.RuleID][]popCount
	// fresh: the node held no other PoP's count when the unheard set
	// became non-empty (its start, before the PoPs it expects were first
	// heard). Its heal ends no cut: nothing was held back, and the node's
	// view of the window then still lags its counts (a sparse total below
	// a quarter of its limit moves in steps), so the heal window's bounds
	// (share_heal.go) would hold a key to what that lagging view says: a
	// fleet starting at once with 60 s windows refused a key from 0.68 of
	// its limit to the end of its first window.
	fresh bool
	// bound is set once a share of the partition denied a request at this node
	// that the whole limit would have let in, in the cut or its hold (the
	// estimate and the request within the limit); one flag for the whole cut,
	// whatever shapes it takes. A heal of a cut that bound nothing here holds
	// no key to the heal window's bounds (share_heal.go): the node admitted
	// what it would have without the cut, so nothing held back opens at the
	// heal, and its view of the window may still lag the counts (sparse totals
	// below a quarter of the limit move in steps). At a fleet's cold start
	// with region voices, a region whose stream had not yet reached a node at
	// its first check of the peers was taken for cut off for a quarter of a
	// second; the heal window's bounds then held a hot key at 1.1 times its
	// limit of 300 to what the lagging view said, from 0.76 of the limit to
	// the end of the first window.
	bound *atomic.Bool
}

// otherReplicas tells, and remembers, which replicas belong to the unheard
// PoPs of a partition: a PoP's nodes and aggregate, and the aggregate of a
// region with an unheard PoP.
type otherReplicas struct {
	mu sync.Mutex
	m  map[crdt.ReplicaID]bool
}

func (o *otherReplicas) of(p *partition, s *crdt.Store, id crdt.ReplicaID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	other, ok := o.m[id]
	if !ok {
		r := s.Replica(id)
		other = p.unheard[popOf(r)]
		if r.IsRegion() {
			for u := range p.unheard {
				if strings.HasPrefix(u, r.Region+"/") {
					other = true
					break
				}
			}
		}
		if len(o.m) < 1<<16 {
			o.m[id] = other
		}
	}
	return other
}

type keyMap struct {
	mu sync.Mutex
	m  map[shareKey]*share
}

type shareKey struct {
	rule crdt.RuleID
	key  string
}

// popCount is one PoP's count of a key in the window seen whole before the
// first cut of a partition.
type popCount struct {
	pop   string // "region/pop"
	count uint64
}

// share is one key's budget during a partition.
type share struct {
	win    int64     // window index c the cut was noticed in
	frozen [2]uint64 // the unheard PoPs' counts of windows c-1 and c
	// base is the key's per-PoP counts of the window seen whole before the
	// first cut (nil for a key without history): the shares of every shape
	// the partition takes are derived from it.
	base []popCount
	// scale is the fleet's demand before the cut over the limit, when the
	// base window shows the key below its limit then (nothing was refused);
	// 1 when it was at its limit or without history.
	scale float64

	mu sync.Mutex
	// rise is the rule's room past snap on a growth a rise of demand on
	// both sides would show as well (Rule.ShareRise, grow).
	rise float64
	// frac is this side's share of the limit, snap the share at the cut;
	// prev the share in force in the previous window, from which a grown
	// share opens as that window's counts decay.
	frac, snap, prev float64
	// This node's demand in window demandWin (whole: measured from the
	// window's start), and in the first whole window of the cut (0: not yet).
	demandWin  int64
	demand     uint64
	whole      bool
	baseDemand float64
	// pre: baseDemand is this node's demand in the window seen whole
	// before the cut (preCut), not one measured in the cut.
	pre bool

	fresh bool // first seen during the cut: no history (see unsure.go)
	// thinDemand is this node's demand of the key in the window seen whole
	// before the cut when it was too thin to measure alone (preCut): a
	// probe in the window the cut began in takes the side's growth for
	// the key's only where the key's own demand grew too (probe).
	thinDemand float64
	// cover is the part of window win left when the cut was noticed: the
	// key's demand is counted from then on, and at cover >= minCover its
	// rate there is the baseline (share_demand.go); 0 for a key first
	// seen during the cut.
	cover float64

	// side is the rule's total over all keys (nil: none); capped says
	// whether cap, the most the key adds to a window of it, is known.
	side   *sideDemand
	cap    uint64
	capped bool

	// ramp opens a share grown inside a window (share_demand.go, probe);
	// probed is the last twentieth of window demandWin probed.
	ramp   shareRamp
	probed int64
	// The demand of window demandWin at two marks taken as it runs, at
	// elapsed parts markE and nextE of it (probe).
	markDemand, nextDemand uint64
	markE, nextE           float64
	// The demand counted in window win, the cut's, by its early mark, a
	// part earlyE of the window after the cut (0: none; markBase).
	earlyDemand uint64
	earlyE      float64

	heal *healCap // the window the heal ends in (share_heal.go); nil before it
	// opened is the last window whose budget was below the share (a grown
	// share opening, or its ramp).
	opened atomic.Int64
	prof   windowProfile // how the cut's last windows were spent
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

// snapshot computes every share key's share from the per-replica counts held
// now. A key the partition before (prev, nil if none) held keeps that
// partition's base window and fleet demand unless this node has seen a
// window whole since it healed: the shares of the new shape are derived from
// counts every side holds alike. A key that had no history in a partition
// that healed takes the counts of the window before the new cut: what it
// kept is no base at all (a PoP heard late at startup, a short partial cut,
// would otherwise leave every key of the next cut in its first window
// split by PoP count).
func (n *Node) snapshot(now int64, unheard, listed map[string]bool, prev *partition) *partition {
	p := &partition{since: now, unheard: unheard, listed: listed, keys: map[shareKey]*share{}, newKeys: &keyMap{m: map[shareKey]*share{}}, bound: new(atomic.Bool),
		sides: map[crdt.RuleID]*sideDemand{}, others: &otherReplicas{m: map[crdt.ReplicaID]bool{}},
		refused: map[crdt.RuleID][]popCount{}, asked: map[crdt.RuleID][]popCount{}}
	p.sideFrac = n.popSplit(listed)
	rs := n.rules.Load()
	cover := map[crdt.RuleID]float64{}
	for _, r := range rs.sorted {
		if r.OnPartition == Share && r.Scope == ScopeGlobal {
			if r.cal == nil && r.width > 0 {
				_, el := r.split(now)
				cover[r.id] = 1 - float64(el)/float64(r.width)
			}
			p.sides[r.id] = &sideDemand{startWin: r.index(now), cover: cover[r.id]}
		}
	}
	type acc struct {
		other [2]uint64
		pops  []popCount
		cur   []popCount // window c's, while the key has none in c-1
	}
	sums := map[shareKey]*acc{}
	repPoP := map[crdt.ReplicaID]string{}
	popOfRep := func(rep crdt.ReplicaID) string {
		pop, ok := repPoP[rep]
		if !ok {
			pop = popOf(n.store.Replica(rep))
			repPoP[rep] = pop
		}
		return pop
	}
	// asked, refused and admitted are, per share rule, what each PoP was
	// asked, refused and admitted in the window before the cut (asked.go).
	asked, refused, admitted := map[crdt.RuleID][]popCount{}, map[crdt.RuleID][]popCount{}, map[crdt.RuleID][]popCount{}
	n.store.Entries(n.indexFunc(rs, now), func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r != nil && r.askedOf != nil {
			if o := r.askedOf; e.Window == o.index(now)-1 {
				switch e.Key {
				case askedKey:
					asked[o.id] = addPoPCount(asked[o.id], popOfRep(rep), e.Count)
				case refusedKey:
					refused[o.id] = addPoPCount(refused[o.id], popOfRep(rep), e.Count)
				}
			}
			return
		}
		if r == nil || r.OnPartition != Share || r.Scope != ScopeGlobal {
			return
		}
		c := r.index(now)
		i := e.Window - (c - 1)
		if i != 0 && i != 1 {
			return
		}
		if i == 0 && r.asked != nil {
			admitted[r.id] = addPoPCount(admitted[r.id], popOfRep(rep), e.Count)
		}
		k := shareKey{e.Rule, e.Key}
		a := sums[k]
		if a == nil {
			a = &acc{}
			sums[k] = a
		}
		pop := popOfRep(rep)
		if unheard[pop] {
			a.other[i] += e.Count
		}
		if i == 0 {
			a.pops = addPoPCount(a.pops, pop, e.Count)
		} else {
			a.cur = addPoPCount(a.cur, pop, e.Count)
		}
	})
	// Per rule: this side's base counts and all of them, and the same of the
	// window the cut began in for keys without a base window.
	sideTot, curTot := map[crdt.RuleID][2]uint64{}, map[crdt.RuleID][2]uint64{}
	kept := map[crdt.RuleID]bool{} // rules with a key that kept a base of prev
	for k, a := range sums {
		r := rs.byID[k.rule]
		c := r.index(now)
		sh := &share{win: c, frozen: a.other, base: a.pops, side: p.sides[k.rule], cover: cover[k.rule], rise: r.shareRise()}
		if old := prev.retained(k, r, c, n.healHold); old != nil {
			old.mu.Lock()
			if old.base != nil || a.pops == nil || prev.healed == 0 {
				sh.base, sh.baseDemand = old.base, old.baseDemand
				kept[k.rule] = true
			}
			old.mu.Unlock()
		}
		sh.scale = demandScale(sh.base, r.Limit)
		sh.frac = max(sideOf(sh.base, unheard, curSide(a.cur, unheard, p.sideFrac)), n.shareFloor)
		sh.snap, sh.prev = sh.frac, sh.frac
		p.keys[k] = sh
		sideTot[k.rule] = addSide(sideTot[k.rule], sh.base, unheard)
		if sh.base == nil {
			curTot[k.rule] = addSide(curTot[k.rule], a.cur, unheard)
		}
	}
	first := map[crdt.RuleID]float64{}
	for id, d := range p.sides {
		// With no count in the window before the cut (a cut in the
		// fleet's first window), the side's part is that of the window
		// the cut began in, as it is each key's (curSide), and so is the
		// node's demand before the cut (firstSpan).
		t := sideTot[id]
		whole := true
		if c := curTot[id]; t[1] == 0 && c[1] >= minCurShare {
			t, whole = c, false
			if r := rs.byID[id]; r != nil {
				first[id] = n.firstSpan(r, now)
			}
		}
		if t[1] > 0 {
			d.part = float64(t[0]) / float64(t[1])
			// What each PoP refused in the window of the bases: the
			// partition's before, when its keys kept their bases (a cut
			// noticed PoP by PoP, or one that changes shape).
			ref, ask, ok := refused[id], atLeast(asked[id], admitted[id]), !kept[id]
			if kept[id] && prev != nil && prev.refused[id] != nil {
				ref, ask, ok = prev.refused[id], prev.asked[id], true
			}
			if whole && ok && ref != nil {
				p.refused[id], p.asked[id] = ref, ask
				d.askedPart(t, addSide([2]uint64{}, ref, unheard), addSide([2]uint64{}, ask, unheard)[1])
				if r := rs.byID[id]; r != nil && r.asked != nil {
					d.sideAsked = n.sideAsked(p, r.asked)
				}
			}
		}
	}
	n.preCut(p, rs, prev, first)
	return p
}

// minCurShare is the least count (in cost units) of the window a cut is
// noticed in that splits a key without history by traffic rather than by
// PoP count.
const minCurShare = 100

// curSide returns the part of cur's counts (a key's counts of the window
// the cut was noticed in) owned by PoPs not in unheard, when the key had no
// count in the window before and cur holds minCurShare at least; def
// otherwise. The sides hold that window as it was before the cut, less
// what was in flight then: a key first seen in a long window (an hour) is
// split by its traffic, not by PoP count, at the cost of a share off by
// the counts of a replication lag.
func curSide(cur []popCount, unheard map[string]bool, def float64) float64 {
	var tot uint64
	for _, pc := range cur {
		tot += pc.count
	}
	if tot < minCurShare {
		return def
	}
	return sideOf(cur, unheard, def)
}

// addSide adds the counts of ps to t: those of PoPs not in unheard to t[0],
// all of them to t[1].
func addSide(t [2]uint64, ps []popCount, unheard map[string]bool) [2]uint64 {
	for _, pc := range ps {
		if !unheard[pc.pop] {
			t[0] = window.SatAdd(t[0], pc.count)
		}
		t[1] = window.SatAdd(t[1], pc.count)
	}
	return t
}

// atLeast returns each PoP's count of asked, or of admitted where that is
// more (a PoP that says it was asked less than it admitted, or says
// nothing: a peer of an older version).
func atLeast(asked, admitted []popCount) []popCount {
	out := slices.Clone(asked)
	for _, b := range admitted {
		found := false
		for i := range out {
			if out[i].pop == b.pop {
				out[i].count, found = max(out[i].count, b.count), true
				break
			}
		}
		if !found {
			out = append(out, b)
		}
	}
	return out
}

func addPoPCount(ps []popCount, pop string, c uint64) []popCount {
	for i := range ps {
		if ps[i].pop == pop {
			ps[i].count = window.SatAdd(ps[i].count, c)
			return ps
		}
	}
	return append(ps, popCount{pop, c})
}

// sideOf returns the part of base's counts owned by PoPs not in unheard, or
// def when base holds no count.
func sideOf(base []popCount, unheard map[string]bool, def float64) float64 {
	var side, tot uint64
	for _, pc := range base {
		tot += pc.count
		if !unheard[pc.pop] {
			side += pc.count
		}
	}
	if tot == 0 {
		return def
	}
	return float64(side) / float64(tot)
}

// shareLimit returns the limit a Share rule enforces for key at now, and
// whether a share applies at all.
func (n *Node) shareLimit(r *ruleState, key string, now, idx, elapsed int64) (float64, *share, bool) {
	p := n.part.Load()
	if p == nil {
		return 0, nil, false
	}
	if p.healed != 0 && now-p.healed >= n.healHold {
		if now >= p.healEnd || !p.bound.Load() {
			n.clearHealed(p)
			return 0, nil, false
		}
		return n.healLimit(p, r, key, now, idx, elapsed)
	}
	sh := p.keys[shareKey{r.id, key}]
	if sh == nil {
		sh = p.newKey(r, key, now, max(p.sideFrac, n.shareFloor))
	}
	frac, prev, ramp := sh.adapt(idx, now, elapsed, r.width, n.shareFloor, n.shareStep)
	frozen := 0.0
	switch idx {
	case sh.win:
		frozen = window.Estimate(sh.frozen[0], sh.frozen[1], elapsed, r.width)
	case sh.win + 1:
		frozen = window.Estimate(sh.frozen[1], 0, elapsed, r.width)
	}
	if p.healed != 0 {
		frozen = max(frozen, n.healHeld(p, r, key, idx, elapsed))
	} else {
		n.mark(sh, r, key, idx, elapsed)
	}
	// A share grown at this window opens as the previous window's counts
	// decay: the other side may have spent its former share then.
	budget := frac
	if frac > prev {
		budget -= (frac - prev) * float64(max(r.width-elapsed, 0)) / float64(r.width)
	}
	budget = min(budget, ramp.open(frac, now))
	opened := sh.opened.Load()
	if budget < frac && opened != idx {
		sh.opened.Store(idx) // once a window: the line stays shared
		opened = idx
	}
	held := 0.0
	if p.healed == 0 && opened == idx-1 {
		held = n.cutHeldBack(sh, r, key, idx, elapsed)
	}
	return budget*float64(r.Limit) + frozen - held, sh, true
}

// cutHeldBack returns what the sliding estimate takes for gone at elapsed
// in window idx of the previous window's counts, where the share opened
// in that window (a grown share opening, or its ramp): its admits then
// came late in it, and the estimate weighs them as spread evenly. The
// cut's marks of that window (share_heal.go) say how they came; the
// difference is held back, as in the window a heal ends in. Without it a
// share that grew inside a window let the next window's trailing count
// pass the limit (failover-to-one-pop 1.105 of it).
func (n *Node) cutHeldBack(sh *share, r *ruleState, key string, idx, elapsed int64) float64 {
	if r.cal != nil || r.width <= 0 || elapsed <= 0 {
		return 0
	}
	sh.mu.Lock()
	marks, ok := sh.prof.of(idx - 1)
	sh.mu.Unlock()
	if !ok {
		return 0
	}
	prev, _, ok := n.store.Peek(r.id, key, idx)
	if !ok || prev == 0 {
		return 0
	}
	var c spentCurve
	c.fromMarks(&marks, float64(prev))
	f := float64(elapsed) / float64(r.width)
	return max(c.after(f)-window.Estimate(prev, 0, elapsed, r.width), 0)
}

// healHeld returns the estimate of key's counts owned by the PoPs that
// were unheard, as this node holds them at a heal. While shares are held
// after a heal the other side's counts arrive, and the estimate a decision
// compares with the share's limit takes them in: without them in the limit
// too, a side whose counts came was held below its share until the hold
// ended, then spent the room that had opened at once, and the window after
// it, which weighs that window's admits as spread evenly, went over the
// limit (1 s windows: 1.22 of it). A side spends its share on top of what
// the other side is known to have spent, as it does on top of the frozen
// counts in the cut.
func (n *Node) healHeld(p *partition, r *ruleState, key string, idx, elapsed int64) float64 {
	prev, cur, ok := n.store.PeekOf(r.id, key, idx, func(id crdt.ReplicaID) bool { return p.others.of(p, n.store, id) })
	if !ok {
		return 0
	}
	return window.Estimate(prev, cur, elapsed, r.width)
}

func (p *partition) newKey(r *ruleState, key string, now int64, frac float64) *share {
	k := shareKey{r.id, key}
	p.newKeys.mu.Lock()
	defer p.newKeys.mu.Unlock()
	sh := p.newKeys.m[k]
	if sh == nil {
		c := r.index(now)
		sh = &share{win: c, frac: frac, snap: frac, prev: frac, scale: 1, fresh: true, side: p.sides[r.id], rise: r.shareRise()}
		if len(p.newKeys.m) < maxNewShareKeys {
			p.newKeys.m[shareKey{r.id, strings.Clone(key)}] = sh
		} // else: decided with a transient share that does not adapt
	}
	return sh
}

// denied records that a share of partition p denied a request the whole
// limit would have let in (see partition.bound).
func (p *partition) denied() {
	if !p.bound.Load() {
		p.bound.Store(true)
	}
}

func (n *Node) clearHealed(p *partition) {
	n.partMu.Lock()
	if n.part.Load() == p {
		n.part.Store(nil)
	}
	n.partMu.Unlock()
}

// Partition returns what the node knows about the current partition at now.
func (n *Node) Partition(now int64) PartitionStatus {
	p := n.part.Load()
	rs := n.rules.Load()
	st := PartitionStatus{SideShare: 1, Unheard: []string{}, Rules: []RulePartition{}}
	active := p != nil && (p.healed == 0 || now-p.healed < n.healHold)
	if active {
		st.Partitioned, st.Since, st.SideShare = true, p.since, p.sideFrac
		for u := range p.listed {
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
