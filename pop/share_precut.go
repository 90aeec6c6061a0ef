package pop

// Each node's demand before a cut (preCut): the baseline a failover at the
// moment of the cut shows against (share_demand.go), and the bases a cut
// that changes shape keeps.

import (
	"github.com/geolimit/geolimit/crdt"
)

// firstSpan returns the part of rule r's window at now that this node has
// decided in when it started deciding in that window (a fleet's first
// window, or a node started in it): from its first decision. 0 when it
// started before the window: a rule with no count before it is then one
// set in it, whose demand this node counted only since, not over the
// window.
func (n *Node) firstSpan(r *ruleState, now int64) float64 {
	if r.cal != nil || r.width <= 0 {
		return 0
	}
	_, el := r.split(now)
	born, ok := n.store.DecidingSince()
	if !ok || born < now-el || born > now {
		return 0
	}
	return float64(now-born) / float64(r.width)
}

// preCut gives the keys of each share rule this node's demand in the window
// seen whole before the cut as their baseline, and the rule's side its
// total over them, when this node can tell that demand for every key it
// served there (crdt's OwnDemand: what it admitted, and what it denied
// while the key was near its limit). A failover at the moment of the cut
// (a site that dies looks exactly like one cut off) then shows against the
// demand before it: measured from the cut on, the demand after the
// failover was the baseline, and a side whose clients doubled at the cut
// kept its share of before (0.29-0.74 of a central limiter's admits in
// the cut). A cut that keeps the base of a partition before it (a cut
// that changes shape) keeps that partition's baselines too.
//
// A rule in first (a cut in the fleet's first window: no count in the
// window before it) takes the node's demand in the window the cut began
// in, before the cut, at its rate over a whole window (first holds the
// part of the window it was counted in), when that part was at least
// minFirstSpan: the failover is then measured against the demand before
// it, not folded into a baseline counted from the cut on.
func (n *Node) preCut(p *partition, rs *ruleSet, prev *partition, first map[crdt.RuleID]float64) {
	type tot struct {
		known, unknown uint64
		keys           int
		span           float64 // the part of a window known was counted in
	}
	tots := map[crdt.RuleID]*tot{}
	carried := map[crdt.RuleID]bool{}
	thin := map[shareKey]float64{} // keys told, too thin to measure alone: their demand
	for k, sh := range p.keys {
		r := rs.byID[k.rule]
		d := p.sides[k.rule]
		if r == nil || d == nil || d.cover <= 0 {
			continue
		}
		f, isFirst := first[k.rule]
		if prev.keeps(r, sh.win, n.healHold) && (!isFirst || prev.sides[k.rule].preLoaded()) {
			// A cut that changes shape (or is noticed PoP by PoP) keeps
			// the baselines of the partition before it; in the fleet's
			// first window, when they were the demand before it (a fleet
			// that starts before it hears every PoP is cut off from them
			// at first).
			if old := prev.retained(k, r, sh.win, n.healHold); old != nil {
				old.mu.Lock()
				sh.pre = old.pre && sh.baseDemand == old.baseDemand
				old.mu.Unlock()
			}
			carried[k.rule] = true
			continue
		}
		if sh.baseDemand != 0 && !isFirst {
			continue
		}
		win, span := sh.win-1, 1.0
		if isFirst {
			if f < minFirstSpan {
				continue
			}
			win, span = sh.win, f
			sh.baseDemand = 0 // one of the fleet's start, counted from it
		}
		t := tots[k.rule]
		if t == nil {
			t = &tot{span: span}
			tots[k.rule] = t
		}
		dem, ok := n.store.OwnDemand(k.rule, k.key, win)
		switch {
		case !ok:
			t.unknown += max(dem, 1) // at least its admits
		case dem > 0:
			t.known += dem
			t.keys++
			if dem >= minShareDemand {
				sh.baseDemand, sh.pre = float64(dem)/span, true
			} else if !isFirst {
				// (In the fleet's first window, the part of it before the
				// cut caps a thin key too low: its failover read as less
				// of one, 0.69 of central on a drawn fleet.)
				thin[k] = float64(dem)
			}
		}
	}
	// Per rule, whether its keys' baselines before the cut stand: carried
	// over with its side's, or told for every key and enough to measure.
	stands := map[crdt.RuleID]bool{}
	for id := range carried {
		od := prev.sides[id]
		stands[id] = od != nil && p.sides[id].preFrom(od)
	}
	for id, t := range tots {
		// A key this node cannot tell makes the total a guess: its growth
		// would read as the side's. A fiftieth of unknown is noise.
		if t.known >= preSideDemand && t.unknown*50 <= t.known {
			p.sides[id].preBase(uint64(float64(t.known)/t.span+0.5), t.keys)
			stands[id] = true
		}
	}
	for k, sh := range p.keys {
		switch {
		case !sh.pre && stands[k.rule] && thin[k] > 0:
			// Its growth is the side's (sidePre): what it adds to the
			// side's total is capped from the cut on, as a measured key's,
			// and its own demand before the cut says which way it moved.
			sh.cap, sh.capped = p.sides[k.rule].capFor(uint64(thin[k]+0.5), true)
			sh.thinDemand = thin[k]
		case !sh.pre:
		case stands[k.rule]:
			sh.cap, sh.capped = p.sides[k.rule].capFor(uint64(sh.baseDemand), true)
		default:
			sh.baseDemand, sh.pre = 0, false
		}
	}
}

// minFirstSpan is the least part of a window a node must have decided in
// before a cut in the fleet's first window for its demand there to be the
// baseline (preCut).
const minFirstSpan = 0.2

// keeps reports whether a cut noticed in window c of rule r keeps the
// base window of partition p (see retained). p may be nil.
func (p *partition) keeps(r *ruleState, c, hold int64) bool {
	return p != nil && (p.healed == 0 || p.healed+hold > r.start(c-1))
}

// retained returns the share of key k (rule r) in partition p when a cut
// noticed in window c keeps p's base: p is still cut, or healed too recently
// for window c-1 to have been seen whole since. p may be nil.
func (p *partition) retained(k shareKey, r *ruleState, c, hold int64) *share {
	if !p.keeps(r, c, hold) {
		return nil
	}
	if sh := p.keys[k]; sh != nil {
		return sh
	}
	p.newKeys.mu.Lock()
	defer p.newKeys.mu.Unlock()
	return p.newKeys.m[k]
}
