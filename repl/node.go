package repl

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// Node is what a Core needs of the node core whose counts it replicates:
// *pop.Node in the daemon and the simulator; a test may script one. The Core
// calls it only from within its own methods, so from its caller's goroutine
// (the runtime serialises them), while the node's decisions may run
// concurrently on other goroutines.
//
// No method may block on I/O or call back into the Core: the caller holds
// its lock on the Core around every call. A method must not panic on
// anything received from the network; it refuses and counts it instead.
type Node interface {
	// Self is the node's replica identity; its Incarnation is the epoch a
	// PoP started by this node gets. It must not change.
	Self() crdt.Replica

	// FlushTo returns the counts changed since the last flush and clears
	// their change marks: Local, the node's own counts for its PoP's
	// members (left empty unless local), and PoP, the PoP totals of the
	// global rules' keys that owns accepts, under the epoch of SetEpoch
	// (none while it is 0). owns is called without any lock of the node
	// held. The returned deltas are fresh: the Core sends them on.
	FlushTo(now int64, owns func(key string) bool, local bool) pop.Batch
	// Pending returns about how many keys changed since the last flush.
	Pending() int
	// AntiEntropyParts returns in how many parts an anti-entropy round of
	// the store's current size is best cut (1 for a small store).
	AntiEntropyParts() int
	// AntiEntropyPart returns part of parts (0 <= part < parts) of every
	// live count: the node's own (Local) and the PoP totals of the keys
	// owns accepts (PoP). The parts of one parts hold each key once; the
	// penalty blocks go with part 0. Change marks are left alone.
	AntiEntropyPart(now int64, owns func(key string) bool, part, parts int) pop.Batch
	// State returns every count the node holds in the live windows, own
	// and remote, one fresh delta per replica: what a joining member merges.
	State(now int64) []wire.Delta
	// Replicas returns the replicas whose counts the node holds, self
	// included.
	Replicas() []crdt.Replica

	// ApplyFrom merges a delta received through a link of scope via
	// (ScopePoP: the own PoP's members; ScopeGlobal: other PoPs'
	// aggregates), refusing what its sender may not say. from, when not
	// nil, caches the sender's identity between calls for one remote PoP.
	// It must not keep d: the transport reuses it.
	ApplyFrom(now int64, d *wire.Delta, via pop.Scope, from *crdt.InternCache) pop.ApplyStats
	// PrefetchDelta is a hint that d is about to be applied; it may do
	// nothing, and must not change any count.
	PrefetchDelta(d *wire.Delta)

	// Rule returns the rule called name.
	Rule(name string) (pop.Rule, bool)
	// WireRule returns the rule (or the window of a rule of several) whose
	// counts travel under the wire name.
	WireRule(wire string) (pop.Rule, bool)
	// Rules returns the current rules, sorted by name.
	Rules() []pop.Rule
	// MaxSkew is how far ahead of this node's clock a peer's may run.
	MaxSkew() time.Duration

	// SetEpoch tells the node the PoP epoch its totals are published under
	// (0: none yet).
	SetEpoch(epoch uint64)
	// SetUnheard tells the node which remote PoPs ("region/pop") it does
	// not hear at now, whenever that set changes (the share policy).
	SetUnheard(now int64, pops []string)
	// SetAllowance tells the node the near-limit allowance of a scope.
	SetAllowance(scope pop.Scope, a pop.Allowance)
	// SetSynced tells the node whether it holds the view of its former
	// incarnations' counts (the startup sync).
	SetSynced(ok bool)

	// TakeModes returns the rules' modes set on this node since the last
	// call (nil when none, cheaply: it is called at every Tick); modes.go.
	TakeModes() []modes.RuleMode
	// Modes returns every rule mode the node holds.
	Modes() []modes.RuleMode
	// MergeModes merges rule modes received from another node, refusing
	// what it may not take.
	MergeModes(now int64, src modes.Source, ms []modes.RuleMode)
}

var _ Node = (*pop.Node)(nil)

// MemberKeeper is a Node that holds state of the PoP's members which must
// go when they leave (pop.Node: their in-flight counts). The Core calls
// KeepMembers when the membership view changes; member reports whether a
// replica is still a live member (or of another PoP). It must not call
// back into the Core.
type MemberKeeper interface {
	KeepMembers(member func(crdt.Replica) bool)
}

var _ MemberKeeper = (*pop.Node)(nil)
