package sim

import (
	"math"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// probe measures convergence after one heal. At the heal instant it takes
// the truth: for each probed key (the first 16 keys of each stream, its
// hottest under a Zipf spread), the join (per-replica maximum) of every
// live node's counts per window, over the nodes that share the key (all
// nodes for a global rule, the node's PoP for a pop rule). The fleet has
// converged when every live node's total of every window of that truth that
// is still live is within 1 % of it. Counts only grow, so once reached this
// holds; the probe samples every output.convergence_step for the first
// second after the heal and every ten steps after that, until then, for at
// most output.convergence_limit (else -1 is reported).
type probe struct {
	heal   int64
	truth  []map[int64]uint64 // per probed key x group: window -> joined total
	result float64            // ms from heal to convergence, or -1
}

// groupOf returns the index of nd's group for a key of the given scope.
func (e *engine) groupOf(nd *simNode, scope uint8) int {
	if pop.Scope(scope) == pop.ScopePoP {
		return int(nd.pop)
	}
	return 0
}

// joinTruth returns, per probed key and group, the joined window totals:
// what a node would see if it had every message any node received. Per
// replica the join is the maximum any node holds. A PoP's own members are
// counted one by one; its aggregate (region/pop/*#epoch, what other PoPs
// hold) stands for the same counts under the PoP's current epoch, so the
// larger of the two is taken, and aggregates of former epochs (counts from
// before the whole PoP restarted) are added.
func (e *engine) joinTruth(t int64) []map[int64]uint64 {
	ng := len(e.pops)
	truth := make([]map[int64]uint64, len(e.convKeys)*ng)
	reps := make([]map[int64]map[string]uint64, len(truth))
	for _, nd := range e.nodes {
		if !nd.up {
			continue
		}
		for ki, k := range e.convKeys {
			v, err := nd.n.View(e.fleetNow(nd, t), k.ruleName, k.key)
			if err != nil {
				continue
			}
			gi := ki*ng + e.groupOf(nd, k.scope)
			if reps[gi] == nil {
				reps[gi] = map[int64]map[string]uint64{}
			}
			for _, w := range v.Windows {
				m := reps[gi][w.Index]
				if m == nil {
					m = map[string]uint64{}
					reps[gi][w.Index] = m
				}
				for r, c := range w.Replicas {
					m[r] = max(m[r], c)
				}
			}
		}
	}
	current, regions := e.currentEpochs(), e.regionEpochs()
	for gi, byWin := range reps {
		truth[gi] = map[int64]uint64{}
		for w, m := range byWin {
			members := map[identity.PoPID]uint64{} // PoP -> sum of its members' counts
			started := map[identity.Replica]bool{} // aggregates of the epochs the members' replicas started
			for s, c := range m {
				if r, err := identity.ParseReplica(s); err == nil && !r.IsPoP() {
					members[r.PoPID] += c
					started[identity.PoPReplica(r.PoPID, r.Incarnation)] = true
				}
			}
			// An aggregate of the current epoch, or of an epoch a member
			// started, stands for members' counts (the larger of the two is
			// the PoP's); one of an epoch whose members are gone adds. A
			// region's aggregate of its current region epoch stands for the
			// region's PoPs in the same way; one of a former epoch adds.
			aggCur := map[identity.PoPID]uint64{}
			regCur := map[string]uint64{}
			byRegion := map[string]uint64{}
			var sum uint64
			for s, c := range m {
				r, err := identity.ParseReplica(s)
				switch {
				case err != nil || !r.IsPoP():
				case r.IsRegion() && r.Incarnation == regions[r.Region]:
					regCur[r.Region] = max(regCur[r.Region], c)
				case r.IsRegion():
					sum += c
				case r.Incarnation == current[r.PoPID] || started[r]:
					aggCur[r.PoPID] = max(aggCur[r.PoPID], c)
				default:
					byRegion[r.Region] += c
				}
			}
			for id, c := range members {
				byRegion[id.Region] += max(c, aggCur[id])
			}
			for id, c := range aggCur {
				if _, ok := members[id]; !ok {
					byRegion[id.Region] += c
				}
			}
			for rg, c := range byRegion {
				sum += max(c, regCur[rg])
			}
			for rg, c := range regCur {
				if _, ok := byRegion[rg]; !ok {
					sum += c
				}
			}
			truth[gi][w] = sum
		}
	}
	return truth
}

// currentEpochs returns the epoch of each PoP's live members.
func (e *engine) currentEpochs() map[identity.PoPID]uint64 {
	out := map[identity.PoPID]uint64{}
	for _, nd := range e.nodes {
		if !nd.up {
			continue
		}
		id := e.pops[nd.pop].id
		if ep := nd.core.Epoch(); ep != 0 && (out[id] == 0 || ep < out[id]) {
			out[id] = ep
		}
	}
	return out
}

// regionEpochs returns the region epoch of each region's live nodes (the
// lowest one known).
func (e *engine) regionEpochs() map[string]uint64 {
	out := map[string]uint64{}
	for _, nd := range e.nodes {
		if !nd.up {
			continue
		}
		id := e.pops[nd.pop].id
		if _, ep := nd.core.RegionVoice(); ep != 0 && (out[id.Region] == 0 || ep < out[id.Region]) {
			out[id.Region] = ep
		}
	}
	return out
}

func (e *engine) converged(p *probe, t int64) bool {
	ng := len(e.pops)
	for _, nd := range e.nodes {
		if !nd.up {
			continue
		}
		for ki, k := range e.convKeys {
			tr := p.truth[ki*ng+e.groupOf(nd, k.scope)]
			if len(tr) == 0 {
				continue
			}
			v, err := nd.n.View(e.fleetNow(nd, t), k.ruleName, k.key)
			if err != nil {
				return false
			}
			cur := k.windowIndex(e.epoch + t)
			for w, want := range tr {
				if w < cur-1 {
					continue
				}
				var got uint64
				for _, vw := range v.Windows {
					if vw.Index == w {
						got = vw.Total
					}
				}
				if float64(got) < 0.99*float64(want) {
					return false
				}
			}
		}
	}
	return true
}

// probe runs probe i at t and returns when to run it next, or never.
func (e *engine) probe(i int, t int64) int64 {
	p := &e.probes[i]
	if p.truth == nil {
		p.truth = e.joinTruth(t)
	}
	if e.converged(p, t) {
		p.result = round(float64(t-p.heal) / 1e6)
		return never
	}
	step := int64(e.sc.Output.ConvergenceStep)
	if t-p.heal >= int64(time.Second) {
		step *= 10 // past the first second, a coarser watch is enough
	}
	if t+step-p.heal > int64(e.sc.Output.ConvergenceLimit) || t+step > e.end {
		p.result = -1
		return never
	}
	return t + step
}

func round(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1e6) / 1e6
}
