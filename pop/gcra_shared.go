// GCRA rules of pop and global scope: a pace shared by replicas without a
// shared TAT.

package pop

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
)

// A GCRA rule of scope pop or global keeps two things per key:
//
//   - what it admitted, counted as a sliding window rule of the same Window
//     counts (the rule's own id and wire name): this node's own cost per
//     window, and every other replica's entries merged by the G-counter
//     merge. Replication, anti-entropy, the caps, eviction and the state
//     file treat these counts as any rule's; the rule's limit clamps a
//     remote count, as it does a sliding window rule's.
//   - this node's TAT of the key, under the rule's pacer (a node-scope
//     state of the rule, never replicated): the GCRA of every increase of
//     the key's counts this node has seen, each at the time it saw it. Its
//     own admissions move it as at node scope (admitGCRA); a merged entry
//     that raised a remote replica's count by d moves it as an admission
//     of cost d at the time of the merge would, unchecked (mergePaced).
//
// No TAT is ever merged with another: each admission is counted once, by
// the node that made it, and reaches every other node as an increase of
// that node's entry. In leaky bucket terms, with A(t) the cost admitted
// fleet-wide (PoP-wide at pop scope) up to t and T the emission interval,
// the level is L(t) = F(t) - min over s <= t of F(s), F(s) = A(s) - s/T;
// this node decides by the same level of A_seen, its own admissions plus
// the increases it merged, each dated by its merge (so a node admits when
// L_seen + cost <= burst). Then:
//
//   - every increase is seen later than it was admitted, so L_seen at t is
//     at least L(t) less the cost admitted elsewhere and not yet merged
//     here: over-admission is bounded, as a sliding window rule's, by the
//     rate times the replication delay (times the sides of a partition
//     under on_partition: keep), and does not compound, since every
//     admission still enters every bucket once merged;
//   - dating an increase by its merge, not by its admission, only raises
//     L_seen (a bucket drains less of a later arrival): the node admits
//     less than an exact GCRA of the merged arrivals by at most the cost
//     in flight when the bucket last ran empty;
//   - a node that joins or restarts dates the live windows' counts it
//     learns from its peers by their arrival: it paces a key busy
//     elsewhere as if all that cost had just arrived, at most two windows
//     long; a key it holds no TAT of (evicted, swept, or counted before a
//     restart) starts from an empty bucket.
//
// A pacer's store window is the rate's tolerance, as a node-scope rule's,
// so a key idle that long is back to a full burst and its TAT may go.

// pacerWire is the suffix of a pacer's name in the rule table: no window's
// name (WindowName) is it, and a pacer's scope is node, so an entry that
// names it is refused by Apply.
const pacerWire = "/gcra"

// newSharedGCRAState compiles a valid GCRA rule of scope pop or global:
// the rule's counts (its own id and wire name, of width Window, decided by
// admitGCRA since multi and pacer are set) and its pacer, a further window
// of the rule's for the rule table, of scope node.
func newSharedGCRAState(r Rule) *ruleState {
	rs := &ruleState{Rule: r, width: int64(r.Window), wire: r.WireName(r.Window), multi: true, rate: r.GCRARate()}
	rs.clamp = r.Limit
	rs.maxCost = r.BurstOf()
	p := &ruleState{Rule: r, wire: r.Name + pacerWire, multi: true, sub: true, gcra: true, rate: rs.rate}
	p.paceBy = p.rate
	p.Scope, p.OnPartition = ScopeNode, Keep
	p.width = max(p.rate.Tolerance(), 1)
	p.Window = time.Duration(p.width)
	p.clamp, p.maxCost = r.Limit, rs.maxCost
	rs.pacer = p
	rs.wins = []*ruleState{rs, p}
	return rs
}

// former returns the window state of the rule called name in rs whose
// counts or TATs the window state w of a new rule set goes on with: of the
// same Window and kind (sameState), or nil. A pop or global gcra rule's
// counts and its pacer may have one Window (burst = limit), and a pacer
// goes on with the TATs of its rule's pacer, or of the rule when it was
// node-scoped.
func (rs *ruleSet) former(name string, w *ruleState) *ruleState {
	if o := rs.window(name, w.Window); o != nil && sameState(o, w) {
		return o
	}
	if r := rs.byName[name]; r != nil && r.pacer != nil && r.pacer.Window == w.Window && sameState(r.pacer, w) {
		return r.pacer
	}
	return nil
}

// paceShared decides a request of cost for key under r, a pop- or
// global-scope GCRA rule, by this node's TAT and counts an admission in
// r's windows for Flush to replicate, under one lock; hp and hc are the
// store's Hashes of (r.pacer.id, key) and (r.id, key). It returns what
// crdt.Store.PaceHashed does.
func (n *Node) paceShared(now int64, r *ruleState, hp, hc uint64, key string, cost uint64) (tat int64, untracked bool) {
	p := r.pacer
	pidx, _ := p.split(now)
	idx, el := r.split(now)
	tat, untracked, _ = n.store.PaceCountHashed(hp, p.id, hc, r.id, key, now, pidx, p.width, p.paceBy, crdt.Now{Index: idx, Elapsed: el, Width: r.width}, cost)
	return tat, untracked
}

// mergePaced merges entry e of replica rep for r, a pop- or global-scope
// GCRA rule, with count its clamped count: an entry that raised the
// replica's count by d moves this node's TAT of the key as an admission of
// d at now would. h is the store's Hash of (r.id, e.Key).
func (n *Node) mergePaced(now, idx int64, r *ruleState, rep crdt.ReplicaID, e *crdt.Entry, h uint64, count uint64) crdt.MergeOutcome {
	o, d := n.store.MergeHashedDiff(h, r.id, e.Key, idx, e.Window, rep, count)
	if d > 0 {
		p := r.pacer
		n.store.PaceAddHashed(crdt.RuleHash(h, r.id, p.id), p.id, e.Key, now, p.width, p.paceBy, d)
	}
	return o
}
