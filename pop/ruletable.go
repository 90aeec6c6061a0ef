// The rule table: compiled rules, their ids and wire names, swapped whole
// by SetRules.

package pop

import (
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gcra"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/window"
)

type ruleSet struct {
	small  []*ruleState // all rules when there are few: a scan beats hashing
	byName map[string]*ruleState
	byID   map[crdt.RuleID]*ruleState // every window of every rule
	byWire map[string]*ruleState      // every window by its name on the wire
	sorted []*ruleState               // by name
	// wires and wired are every window's wire name and state when there
	// are few windows, for getWire to scan (nil otherwise).
	wires []string
	wired []*ruleState
	// asking is the rules whose asked cost is counted (asked.go).
	asking []*ruleState
}

// ruleState is a rule, or one further window of a rule of several (sub):
// each window has its own id and counts, and a Rule whose Limit and Window
// are the window's.
type ruleState struct {
	Rule
	id    crdt.RuleID
	width int64
	cur   atomic.Pointer[winCache]
	// guarded: the rule has a penalty box or fails closed (block.go,
	// unsure.go); other rules' decisions look nothing more up.
	guarded bool
	// gated is guarded, or the rule is switched off at run time: the one
	// flag a decision tests before it reads a count (modes.go).
	gated atomic.Bool
	// dropped: the rule was removed and its retired counts dropped; its ID
	// may serve another rule (handle.go).
	dropped atomic.Bool
	// wire is the window's name on the wire (Rule.WireName).
	wire string
	// fp is the window's Rule.Fingerprint (Link.Rules).
	fp uint64
	// effMode is the Mode decisions use: the rule's own, or the one set
	// at run time (modes.go).
	effMode atomic.Uint32
	// clamp is the largest limit the window gives any key (Apply's clamp).
	clamp uint64
	// multi: several windows, overrides or tiers; decided by admitWindows
	// (limits.go) with wins, lims and maxCost.
	multi   bool
	sub     bool // a further window, reached through its rule's wins only
	wins    []*ruleState
	lims    *limitTable
	maxCost uint64
	// gcra: a GCRA rule (gcra.go), decided by admitGCRA with rate; multi
	// is set too, so that the one-window path tests one flag (admitWindows
	// hands it to admitGCRA).
	gcra bool
	rate gcra.Rate
	// paceBy is rate as the store decides TATs by it (crdt.Pacer), boxed
	// once with the rule rather than at every decision.
	paceBy crdt.Pacer
	// pacer: of a pop- or global-scope GCRA rule, the node-scope state
	// that keeps this node's TATs of its keys (gcra_shared.go).
	pacer *ruleState
	// cal: of a calendar rule, its calendar (calendar.go); nil otherwise.
	cal *window.Calendar
	// asked: of a global share rule, the window that counts the cost its
	// keys were asked, admitted or refused (asked.go); askedOf: of that
	// window, its rule.
	asked, askedOf *ruleState
}

// winCache remembers the rule's current window [start, end) so that the
// hot path does not pay a 64-bit division (or a calendar's date maths) per
// decision; elapsed counts from base (start, or a calendar's index*width).
type winCache struct{ index, start, end, base int64 }

// split is window.Split(now, r.width) (for a calendar rule,
// window.Calendar.Split), cached per window.
func (r *ruleState) split(now int64) (index, elapsed int64) {
	if c := r.cur.Load(); c != nil && now >= c.start && now < c.end {
		return c.index, now - c.base
	}
	if r.cal != nil {
		return r.splitCalendar(now)
	}
	index, elapsed = window.Split(now, r.width)
	start := now - elapsed
	r.cur.Store(&winCache{index: index, start: start, end: start + r.width, base: start})
	return index, elapsed
}

// SetRules replaces the rule set. Windows whose rule name and width are
// unchanged keep their counts (limits, overrides, tiers, cost, scope, mode
// and policy may change); others start empty. A removed window's counts (or
// a rule's under its former window) are kept for two of its windows after
// the next Tick: a window set again with that rule name and width within
// that time goes on with them (retired.go). An invalid set changes nothing.
func (n *Node) SetRules(rules []Rule) error {
	if err := ValidateRules(rules); err != nil {
		return fmt.Errorf("pop: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.rules.Load()
	next := &ruleSet{byName: map[string]*ruleState{}, byID: map[crdt.RuleID]*ruleState{}, byWire: map[string]*ruleState{}}
	kept := map[crdt.RuleID]bool{}
	for _, r := range rules {
		rs := newRuleState(r)
		rs.guarded = r.BlockFor != 0 || r.OnUnsure != AllowUnsure || r.Kind == Concurrency
		rs.setOverride(modes.RuleMode{Mode: modes.Config}) // until storeRules applies a mode set at run time
		for _, w := range rs.windows() {
			if err := n.assignID(w, old.former(r.Name, w), kept); err != nil {
				return err
			}
		}
		if err := n.setAsked(rs, old, next, kept); err != nil { // asked.go
			return err
		}
		for _, w := range rs.windows() {
			w.fp = w.Fingerprint()
			next.byID[w.id] = w
			next.byWire[w.wire] = w
			if w.gcra {
				n.store.SetProtect(w.id, protectGCRA(w))
			} else {
				n.store.SetProtect(w.id, protectThreshold(w.Limit))
			}
			n.store.SetKeepSpent(w.id, w.cal != nil) // a calendar quota's spent count is never forgotten
		}
		next.byName[r.Name] = rs
		next.sorted = append(next.sorted, rs)
	}
	sort.Slice(next.sorted, func(i, j int) bool { return next.sorted[i].Name < next.sorted[j].Name })
	if len(next.sorted) <= smallRuleSet {
		next.small = next.sorted
	}
	if len(next.byWire) <= smallRuleSet {
		for _, rs := range next.sorted {
			for _, w := range rs.windows() {
				next.wires = append(next.wires, w.wire)
				next.wired = append(next.wired, w)
			}
			if q := rs.asked; q != nil {
				next.wires = append(next.wires, q.wire)
				next.wired = append(next.wired, q)
			}
		}
	}
	n.storeRules(next) // with the modes set at run time
	for id, o := range old.byID {
		if !kept[id] {
			n.retire(o)
		}
	}
	n.resnapshot()
	return nil
}

// protectThreshold is the count, over a key's live windows, at or above
// which the store counts a key as being limited and keeps it (see
// crdt.Store.SetProtect): more than half the limit. Keys further from their
// limit make room for new keys, so a flood of keys must spend more than
// half a limit on each key to hold its place.
func protectThreshold(limit uint64) uint64 { return limit/2 + 1 }

// smallRuleSet is the most rules looked up by a linear scan.
const smallRuleSet = 8

func (rs *ruleSet) get(name string) (*ruleState, bool) {
	if rs.small != nil || len(rs.byName) == 0 {
		for _, r := range rs.small {
			if r.Name == name {
				return r, true
			}
		}
		return nil, false
	}
	r, ok := rs.byName[name]
	return r, ok
}

// getWire returns the window named wire on the wire. Every received entry
// names one, so a small table is scanned: one compact read where a map
// look-up takes a few cache misses on a node that merges little at a time.
func (rs *ruleSet) getWire(wire string) (*ruleState, bool) {
	if rs.wires != nil || len(rs.byWire) == 0 {
		for i, w := range rs.wires {
			if w == wire {
				return rs.wired[i], true
			}
		}
		return nil, false
	}
	r, ok := rs.byWire[wire]
	return r, ok
}

// assignID gives window state w the ID of o, the window of the rule set
// before whose counts it goes on with (nil: none), unless another took it
// (kept), else that of a retired window it may go on with, else a new
// one. Requires n.mu held.
func (n *Node) assignID(w, o *ruleState, kept map[crdt.RuleID]bool) error {
	if o != nil && !kept[o.id] {
		w.id = o.id
		kept[o.id] = true
		return nil
	}
	if id, ok := n.unretire(w); ok {
		w.id = id
		return nil
	}
	id, err := n.allocID()
	if err != nil {
		return err
	}
	w.id = id
	return nil
}

func (n *Node) allocID() (crdt.RuleID, error) {
	if k := len(n.freeID); k > 0 {
		id := n.freeID[k-1]
		n.freeID = n.freeID[:k-1]
		return id, nil
	}
	if int(n.nextID) >= crdt.MaxRules {
		return 0, fmt.Errorf("pop: more than %d counted windows (one a window of each rule, one more a global share rule)", crdt.MaxRules)
	}
	id := n.nextID
	n.nextID++
	return id, nil
}

// Rules returns the current rules, sorted by name.
func (n *Node) Rules() []Rule {
	rs := n.rules.Load()
	out := make([]Rule, len(rs.sorted))
	for i, r := range rs.sorted {
		out[i] = r.Rule
	}
	return out
}

// Rule returns the rule called name.
func (n *Node) Rule(name string) (Rule, bool) {
	r, ok := n.rules.Load().byName[name]
	if !ok {
		return Rule{}, false
	}
	return r.Rule, true
}
