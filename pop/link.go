package pop

import "github.com/geolimit/geolimit/replicated"

// Link is the node as its replication layer sees it (package repl drives it
// through its Node interface): what the node sends (Flush, AntiEntropy,
// State), merges (Apply, MergeModes) and what the layer tells it about its
// replicas (SetEpoch, SetUnheard, SetAllowance, SetSparse, region voices).
// The front ends never need it; they decide through the Node.
//
// A Link is a small value: get it once with Node.Link and keep it.
type Link struct{ n *Node }

// Link returns the node's replication side.
func (n *Node) Link() Link { return Link{n} }

// Rule returns what the replication layer knows of the rule called name.
func (l Link) Rule(name string) (replicated.RuleInfo, bool) {
	r, ok := l.n.rules.Load().byName[name]
	if !ok {
		return replicated.RuleInfo{}, false
	}
	return r.info(), true
}

// WireRule returns what the replication layer knows of the rule (or the
// window of a rule of several) whose counts travel under the wire name.
func (l Link) WireRule(wire string) (replicated.RuleInfo, bool) {
	r, ok := l.n.rules.Load().getWire(wire)
	if !ok {
		return replicated.RuleInfo{}, false
	}
	return r.info(), true
}

// Rules returns what the replication layer knows of the current rules,
// sorted by name.
func (l Link) Rules() []replicated.RuleInfo {
	rs := l.n.rules.Load()
	out := make([]replicated.RuleInfo, len(rs.sorted))
	for i, r := range rs.sorted {
		out[i] = r.info()
	}
	return out
}

// info is what the replication layer knows of the rule.
func (r *ruleState) info() replicated.RuleInfo {
	return replicated.RuleInfo{Name: r.Name, Scope: r.Scope, Window: r.Window, BlockFor: r.BlockFor, Fingerprint: r.fp}
}

// Node returns the node whose replication side l is.
func (l Link) Node() *Node { return l.n }
