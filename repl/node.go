package repl

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// Node is what a Core needs of the node core whose counts it replicates:
// the node's pop.Link in the daemon and the simulator; a test may script
// one. The Core
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
	Self() identity.Replica

	// FlushTo returns the counts changed since the last flush and clears
	// their change marks: Local, the node's own counts for its PoP's
	// members (left empty unless local), and PoP, the PoP totals of the
	// global rules' keys that owns accepts, under the epoch of SetEpoch
	// (none while it is 0). owns is called without any lock of the node
	// held. The returned deltas are fresh: the Core sends them on.
	FlushTo(now int64, owns func(key string) bool, local bool) replicated.Batch
	// Pending returns about how many keys changed since the last flush.
	Pending() int
	// AntiEntropyParts returns in how many parts an anti-entropy round of
	// the store's current size is best cut (1 for a small store).
	AntiEntropyParts() int
	// AntiEntropyPart returns part of parts (0 <= part < parts) of every
	// live count: the node's own (Local) and the PoP totals of the keys
	// owns accepts (PoP). The parts of one parts hold each key once; the
	// penalty blocks go with part 0. Change marks are left alone.
	AntiEntropyPart(now int64, owns func(key string) bool, part, parts int, changed bool) replicated.Batch
	// State returns every count the node holds in the live windows, own
	// and remote, one fresh delta per replica: what a joining member merges.
	State(now int64) []wire.Delta
	// Replicas returns the replicas whose counts the node holds, self
	// included.
	Replicas() []identity.Replica

	// ApplyFrom merges a delta received through a link of scope via
	// (ScopePoP: the own PoP's members; ScopeGlobal: other PoPs'
	// aggregates), refusing what its sender may not say. from, when not
	// nil, caches the sender's identity between calls for one remote PoP.
	// It must not keep d: the transport reuses it.
	ApplyFrom(now int64, d *wire.Delta, via replicated.Scope, from *crdt.InternCache) replicated.ApplyStats
	// PrefetchDelta is a hint that d is about to be applied; it may do
	// nothing, and must not change any count.
	PrefetchDelta(d *wire.Delta)

	// Rule returns the rule called name.
	Rule(name string) (replicated.RuleInfo, bool)
	// WireRule returns the rule (or the window of a rule of several) whose
	// counts travel under the wire name.
	WireRule(wire string) (replicated.RuleInfo, bool)
	// Rules returns the current rules, sorted by name.
	Rules() []replicated.RuleInfo
	// MaxSkew is how far ahead of this node's clock a peer's may run.
	MaxSkew() time.Duration

	// SetEpoch tells the node the PoP epoch its totals are published under
	// (0: none yet).
	SetEpoch(epoch uint64)
	// SetPoPs tells the node which remote PoPs ("region/pop") count in the
	// fleet (expected, or whose counts were merged: Core.counts), before
	// each SetUnheard: the share policy splits by PoPs what no count tells.
	SetPoPs(pops []string)
	// SetUnheard tells the node which remote PoPs ("region/pop") it does
	// not hear at now, whenever that set changes (the share policy).
	SetUnheard(now int64, pops []string)
	// SetDown tells the node which of the unheard PoPs are taken for down
	// (crashed, not cut off: crash.go), whenever that set changes: the
	// near-limit allowance leaves them out as it does the unheard ones,
	// the share policy holds this side to no share for them.
	SetDown(now int64, pops []string)
	// SetAllowance tells the node the near-limit allowance of a scope.
	SetAllowance(scope replicated.Scope, a replicated.Allowance)
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

	// KeepMembers drops the state the node holds of the PoP's members
	// that left (their in-flight counts). The Core calls it when the
	// membership view changes; member reports whether a replica is still a
	// live member (or of another PoP).
	KeepMembers(member func(identity.Replica) bool)

	// SetSparse tells the node to leave out of its flushes the PoP totals
	// that moved by less than a step derived from voices, the PoPs that
	// publish totals of a key (sparse.go); voices <= 0 turns it off. lag is
	// the time a change takes to reach every node.
	SetSparse(voices int, lag time.Duration)
	// SparseStats returns how many PoP totals sparse updates left out, and
	// how many keys they hold back now.
	SparseStats() (skipped uint64, held int)

	// SetRegionVoice tells the node whether its PoP speaks for its region
	// and under which region epoch (region.go).
	SetRegionVoice(on bool, epoch uint64)
	// FlushRegion returns the region totals that moved since the last
	// call, of the keys owns accepts.
	FlushRegion(now int64, owns func(key string) bool) wire.Delta
	// RegionAntiEntropyPart returns part of parts of every live region
	// total of the keys owns accepts.
	RegionAntiEntropyPart(now int64, owns func(key string) bool, part, parts int, changed bool) wire.Delta
	// SetRegionSparse is SetSparse for the region totals, among voices
	// regions.
	SetRegionSparse(voices int, lag time.Duration)
}
