package pop

import (
	"slices"
	"testing"

	"github.com/geolimit/geolimit/internal/statefile"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/wire"
)

// setBeforeCount sets the hook that runs between the check of an
// all-or-nothing request and its counts (testHookBeforeCount) until the
// test ends or it is set again. Tests that set it do not run in parallel.
func setBeforeCount(t testing.TB, f func()) {
	testHookBeforeCount = f
	t.Cleanup(func() { testHookBeforeCount = nil })
}

// Entry points the tests use; the front ends decide through DecideChecks,
// DecideCheck and Decide.

// Retired returns the names of the rules whose counts are kept after their
// removal, sorted.
func (n *Node) Retired() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.retired))
	for k := range n.retired {
		out = append(out, k.name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ReleaseResults gives back every lease the results hold (a request's,
// when it is done).
func (n *Node) ReleaseResults(now int64, res []Result) {
	for i := range res {
		if res[i].Lease.l != nil {
			n.Release(now, res[i].Lease.ID())
		}
	}
}

// Remembered returns whether a decision is remembered at now for key's
// idempotency key idem under rule, for a request of cost (0: the rule's)
// and tier, and whether it allowed the request.
func (n *Node) Remembered(now int64, rule, key, idem string, cost uint64, tier string) (allowed, ok bool) {
	r, found := n.rules.Load().get(rule)
	if !found {
		return false, false
	}
	if cost == 0 {
		cost = r.Cost
	}
	v, ok := n.memos.Get(r.id, memos.IDOf(key, idem, cost, tier), now)
	return v&memos.Allowed != 0, ok
}

// Snapshot returns what a restarted incarnation of this node needs to go on
// where this one stopped (see Restore): SnapshotEach's deltas, copied and
// merged into one delta per owning replica, sorted by replica.
func (n *Node) Snapshot(now int64) []wire.Delta {
	return statefile.Collect(n.SnapshotEach(now))
}

// Restore merges a former incarnation's Snapshot into the node (see
// RestoreDelta), before it decides.
func (n *Node) Restore(now int64, ds []wire.Delta) ApplyStats {
	var st ApplyStats
	for i := range ds {
		st.Add(n.RestoreDelta(now, &ds[i]))
	}
	return st
}

// Penalize puts key in rule's penalty box as Decide does for a counted
// denial, for a request denied on d, a decision Peek took (Peek starts no
// block): a caller that checks several rules without counting and then
// denies the request calls it for the rules that denied. It updates d as
// Decide would have (Blocked, BlockStarted, RetryAfter). It does nothing for
// a rule without BlockFor, an admission, a key already blocked or an unsure
// denial.
func (n *Node) Penalize(now int64, rule, key string, d *Decision) {
	if r, ok := n.rules.Load().get(rule); ok {
		n.penalize(now, r, key, d)
	}
}

// DecideWith is Decide for a request that names a tier (Options.Tier). On a
// rule without tiers it is Decide.
func (n *Node) DecideWith(now int64, rule, key string, cost uint64, o Options) (Decision, error) {
	return n.decideWith(now, rule, key, cost, o.Tier, true)
}

// PeekWith is Peek for a request that names a tier.
func (n *Node) PeekWith(now int64, rule, key string, cost uint64, o Options) (Decision, error) {
	return n.decideWith(now, rule, key, cost, o.Tier, false)
}

// Limits returns the limits that apply to key under tier in rule, one per
// window in the order of Rule.Windows: what DecideWith compares the
// request with. It allocates; the RateLimit-Policy of a request whose
// Decision.Limits is set is built from it.
func (n *Node) Limits(rule, key, tier string) ([]Limit, bool) {
	r, ok := n.rules.Load().byName[rule]
	if !ok {
		return nil, false
	}
	ws := r.Windows()
	if l := r.limitsFor(key, tier); l != nil {
		for i := range ws {
			ws[i].Limit = l[i]
		}
	}
	return ws, true
}

// DecideHandle is Decide for a resolved rule.
func (n *Node) DecideHandle(now int64, h RuleHandle, key string, cost uint64) (d Decision, err error) {
	if h.r == nil || h.r.dropped.Load() {
		return Decision{}, ErrUnknownRule
	}
	err = n.decideRule(&d, now, h.r, key, cost, "", howCount, nil)
	return
}

// PeekHandle is Peek for a resolved rule.
func (n *Node) PeekHandle(now int64, h RuleHandle, key string, cost uint64) (d Decision, err error) {
	if h.r == nil || h.r.dropped.Load() {
		return Decision{}, ErrUnknownRule
	}
	err = n.decideRule(&d, now, h.r, key, cost, "", 0, nil)
	return
}

// DecideHandleWith is DecideWith for a resolved rule.
func (n *Node) DecideHandleWith(now int64, h RuleHandle, key string, cost uint64, o Options) (Decision, error) {
	if h.r == nil || h.r.dropped.Load() {
		return Decision{}, ErrUnknownRule
	}
	var d Decision
	err := n.decideRule(&d, now, h.r, key, cost, o.Tier, howCount, nil)
	return d, err
}

// mustHandle returns the handle of rule name (the zero handle when there is
// no such rule).
func mustHandle(n *Node, name string) RuleHandle {
	h, _ := n.Handle(name)
	return h
}

// WireRule returns the rule of the window whose counts travel under the
// wire name (Rule.WireName): for a window of a rule of several, a Rule
// whose Limit and Window are that window's (the largest limit a key may
// have there is the rule's concern, not the wire's).
func (n *Node) WireRule(wire string) (Rule, bool) {
	r, ok := n.rules.Load().getWire(wire)
	if !ok {
		return Rule{}, false
	}
	return r.Rule, true
}
