package pop

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// A rule removed from the rule set (or set again with another window) is
// retired, not dropped: its rule ID and counts are kept for two of its
// windows, so that a rule restored within that time (a truncated config file
// put right, a reload undone) goes on where it was instead of admitting its
// whole limit again under the same replica identity. Retired rules decide
// nothing and merge nothing; their keys only wait. The two windows are
// counted from the first Tick after the retirement (SetRules takes no time).

// retiredRule is a rule's ID and counts kept after its removal.
type retiredRule struct {
	rs    *ruleState
	until int64 // when the counts are dropped; 0: set at the next Tick
}

// retire keeps r's counts (see above); a rule of that name retired before
// is dropped now. Requires n.mu held.
func (n *Node) retire(r *ruleState) {
	if n.retired == nil {
		n.retired = map[retiredKey]retiredRule{}
	}
	k := retiredKey{r.Name, r.Window}
	if o, ok := n.retired[k]; ok {
		n.dropRetired(k, o)
	}
	n.retired[k] = retiredRule{rs: r}
}

// retiredKey names a retired window: its rule's name and its width (a rule
// of several windows retires each).
type retiredKey struct {
	name   string
	window time.Duration
}

// unretire returns the ID of the window retired from w's rule with w's
// width, and takes it out of retirement, when its counts may serve w
// (sameState). Requires n.mu held.
func (n *Node) unretire(w *ruleState) (crdt.RuleID, bool) {
	k := retiredKey{w.Name, w.Window}
	o, ok := n.retired[k]
	if !ok || !sameState(o.rs, w) {
		return 0, false
	}
	delete(n.retired, k)
	return o.rs.id, true
}

// dropRetired drops a retired rule's counts and frees its ID. Requires n.mu
// held.
func (n *Node) dropRetired(name retiredKey, o retiredRule) {
	o.rs.dropped.Store(true) // before the ID can serve another rule
	n.store.DropRule(o.rs.id)
	n.blocks.DropRule(o.rs.id)
	n.memos.DropRule(o.rs.id)
	n.slots.dropRule(o.rs.id)
	n.freeID = append(n.freeID, o.rs.id)
	delete(n.retired, name)
}

// sweepIndex is the window index function Tick sweeps with: the live rules'
// and the retired ones' (whose keys stay until dropped). It starts the
// retired rules' two windows, and drops those whose time has passed.
func (n *Node) sweepIndex(now int64) func(crdt.RuleID) int64 {
	live := n.sweepLive(n.rules.Load(), now)
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.retired) == 0 {
		return live
	}
	widths := make(map[crdt.RuleID]int64, len(n.retired))
	cals := map[crdt.RuleID]*ruleState{} // retired calendar rules
	for name, o := range n.retired {
		switch {
		case o.until == 0:
			o.until = now + 2*int64(o.rs.Window)
			n.retired[name] = o
		case now >= o.until:
			n.dropRetired(name, o)
			continue
		}
		widths[o.rs.id] = int64(o.rs.Window)
		if o.rs.cal != nil {
			cals[o.rs.id] = o.rs
		}
	}
	return func(id crdt.RuleID) int64 {
		if r, ok := cals[id]; ok {
			return r.index(now)
		}
		if w, ok := widths[id]; ok {
			idx, _ := window.Split(now, w)
			return idx
		}
		return live(id)
	}
}
