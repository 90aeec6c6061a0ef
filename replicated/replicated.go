// Package replicated holds what a node's replicated state and the layer
// that replicates it share, so that neither imports the other: how far a
// rule's counts travel (Scope), what a node sends (Batch), what it did with
// what it received (ApplyStats), what the replication layer tells it about
// its replicas (Allowance), the step of sparse updates (SparseStep) and what
// the replication layer knows of a rule (RuleInfo).
//
// The node (package pop) implements the interface the replication layer
// (package repl) drives it through; both speak in these types. Each
// replicated feature beside the counts owns its state, merge rule, wire
// section and trust rule in a package of its own below this one
// (replicated/blocks, replicated/memos, replicated/modes,
// replicated/inflight); the counts are the windowed G-counters of package
// crdt.
package replicated

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/wire"
)

// Scope says how far a rule's counts travel.
type Scope uint8

// Scopes.
const (
	// ScopeNode counts are never replicated.
	ScopeNode Scope = iota
	// ScopePoP counts are shared by the nodes of one PoP only (anycast keeps a
	// client IP on one PoP, so per-IP limits need go no further).
	ScopePoP
	// ScopeGlobal counts are shared by every node of every PoP and region.
	ScopeGlobal
)

var scopeNames = [...]string{"node", "pop", "global"}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("Scope(%d)", s)
}

// ParseScope parses "node", "pop" or "global".
func ParseScope(s string) (Scope, error) {
	for i, n := range scopeNames {
		if s == n {
			return Scope(i), nil
		}
	}
	return 0, fmt.Errorf("unknown scope %q (want node, pop or global)", s)
}

// RuleInfo is what the replication layer knows of a rule (or of one window
// of a rule of several): the name its counts travel under, their scope and
// window, how long a penalty block of it lasts, and the fingerprint of its
// definition that nodes compare to find rules that differ across the fleet.
type RuleInfo struct {
	Name        string
	Scope       Scope
	Window      time.Duration
	BlockFor    time.Duration
	Fingerprint uint64
}

// Batch is what a node sends. Local goes to the own PoP's members: own counts
// of pop- and global-scope rules, Sender = the node's replica, Epoch = the
// node's epoch. PoP goes to the other PoPs: PoP totals of global-scope rules
// for the keys the node publishes, Sender = the PoP's aggregate replica of
// its epoch. PoP is empty while the epoch is 0. Both carry SentAt and Epoch;
// either may have no entries.
type Batch struct {
	Local, PoP wire.Delta
}

// Allowance is what the replication layer tells a node about one scope's
// replication: how far its admits may run ahead of what the other replicas
// hold near a limit.
type Allowance struct {
	// Horizon is how long after a flush every other replica of the scope
	// holds the own counts the flush sent: for pop-scope rules, the PoP's
	// latency; for global rules, the hop to the key's owner, the speaker's
	// delay and the latency to the farthest PoP heard.
	Horizon time.Duration
	// Members is how many nodes of the PoP may admit a key of the scope,
	// this one included (the live members); PoPs how many PoPs (1 for pop
	// scope; for global rules the PoPs heard and not partitioned, this one
	// included).
	Members, PoPs int
	// Reach is, for global rules, the horizon of the fleet's slowest
	// path to the other PoPs (a node of a PoP of several nodes that is
	// not its region's voice): a node whose Horizon is shorter holds its
	// share of the headroom for that much less time, and scales its
	// share by the two lags (crdt.Allowance.Reach). 0: Horizon.
	Reach time.Duration
}

// Replicas is how many nodes may admit a key: Members x PoPs.
func (a Allowance) Replicas() int { return max(a.Members, 1) * max(a.PoPs, 1) }

// SparseStep returns the step of sparse updates for a rule of limit among
// voices PoPs: a PoP publishes a key's total again only once it has moved by
// at least the step since it last published it, unless the key is near its
// limit (SparseNear). It is floor(limit / (4 x voices)); a step of 1 or less
// (a small limit, many voices, or voices < 1) means every change is
// published.
//
// The bound: what one PoP leaves unpublished of a key's window is below
// the step, so the voices together leave less than limit/4 of each window,
// and a node's view of a key's sliding estimate (the previous window
// weighted by at most 1, plus the current one) is below the truth by less
// than limit/2, on top of the usual replication lag. That lag is at most
// lag/window of the limit for a key admitted at its limit's rate, where lag
// is the time a change takes to reach every node (a flush interval plus
// the allowance's horizon); sparse updates apply only to windows of at least
// SparseMinWindow(lag), where it is at most limit/8. A PoP publishes every
// change of a key whose estimate it sees at SparseNear (limit/4) or above.
// So when a key's true estimate reaches its limit, every view of it is above
// limit - limit/2 - limit/8 > limit/4: every PoP publishes the key's total
// at each flush as it would without sparse updates, and the views are exact
// up to the usual lag. Sparse updates then add no over-limit admits but
// those of the flush interval the last PoP takes to see the key near its
// limit, and none to a key below its limit.
func SparseStep(limit uint64, voices int) uint64 {
	if voices < 1 {
		return 0
	}
	return limit / (4 * uint64(voices))
}

// SparseNear returns the estimate of a key of limit at or above which its
// PoP totals are published at every change: a quarter of the limit.
func SparseNear(limit uint64) float64 { return float64(limit) / 4 }

// SparseMinWindow returns the shortest window whose rules take sparse
// updates when a change takes lag to reach every node: 8 x lag, so that the
// usual replication lag hides at most an eighth of a limit.
func SparseMinWindow(lag time.Duration) time.Duration { return 8 * lag }
