// Package pop is the geolimit node core: rules, local decisions, and the
// merging and production of replication deltas.
//
// Like etcd's raft core, it is synchronous and deterministic. It starts no
// goroutine, reads no clock and knows nothing about sockets: the caller passes
// the time (Unix nanoseconds) and moves the deltas. The daemon and the
// simulator drive the very same Node.
//
// Replication has two levels. Inside a PoP, nodes (members) exchange their
// own per-node counts of pop- and global-scope rules (Batch.Local, applied
// via ScopePoP). Between PoPs, a PoP speaks with one voice: its aggregate
// replica (identity.PoPReplica, in the PoP's epoch) carries the PoP total of each
// global-scope key, the node's own count plus its members' (Batch.PoP,
// applied via ScopeGlobal). The replication layer agrees on the epoch
// (SetEpoch) and decides which member publishes which key's aggregate (the
// owns callback of Flush and AntiEntropy).
//
//	n, _ := pop.New(pop.Config{Self: self, Rules: rules})
//	n.SetEpoch(epoch) // agreed by the PoP's members; no aggregate while 0
//	d, err := n.Decide(clk.Now(), "api", "203.0.113.7", 1)
//	b := n.Flush(clk.Now(), owns)
//	sendToMembers(b.Local)
//	sendToOtherPoPs(b.PoP)
//	n.Apply(clk.Now(), fromMember, pop.ScopePoP)
//	n.Apply(clk.Now(), fromOtherPoP, pop.ScopeGlobal)
//	n.Tick(clk.Now()) // every second or so: drops expired keys
//
// A request of several checks (one per applicable rule, a batch, an Envoy
// request's descriptors) is decided by one call, each check on its own or
// all or nothing, and the call names the check that binds (pipeline.go):
//
//	api, _ := n.Handle("api")
//	perIP, _ := n.Handle("per-ip")
//	res := make([]pop.Result, 2)
//	out, err := n.DecideChecks(now, &pop.Request{Combine: pop.All, Checks: []pop.Check{
//		{Rule: api, Key: "k-123"}, {Rule: perIP, Key: "203.0.113.7"}}}, res)
//	// out.Allowed; res[out.Binding] speaks for the request
//
// Within one check the decision order (penalty box, partition share, fail
// closed, admit, shadow) is written once, in decideRule (decide.go).
//
// A rule of Kind Concurrency limits requests in flight instead of a rate
// (concurrency.go): its check, in the same DecideChecks call, acquires
// slots and its Result carries a Lease, given back with Release or at the
// rule's LeaseTTL; its pop-scope in-flight counts travel in Batch.Local
// (inflight.go):
//
//	res := make([]pop.Result, 1)
//	out, _ := n.DecideChecks(now, &pop.Request{Checks: []pop.Check{{Rule: uploads, Key: "k-123"}}}, res)
//	if out.Allowed { defer n.Release(clk.Now(), res[0].Lease) }
//
// Near a limit a node spends only its share of the headroom while its own
// admits are unseen by the others (the near-limit allowance, allowance.go):
// the replication layer tells it the lag and the number of replicas
// (SetAllowance), and decisions far from a limit are not affected.
package pop

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/replicated/modes"
)

// Errors returned by Decide. Nothing is counted when one is returned.
var (
	ErrUnknownRule   = errors.New("pop: unknown rule")
	ErrEmptyKey      = errors.New("pop: empty key")
	ErrKeyTooLong    = fmt.Errorf("pop: key longer than %d bytes", crdt.MaxKeyLen)
	ErrBadCost       = errors.New("pop: cost must be at least 1")
	ErrCostOverLimit = errors.New("pop: cost exceeds the rule's limit")
)

// Config configures a Node.
type Config struct {
	// Self is this node's replica identity, with an incarnation that is new at
	// every start.
	Self identity.Replica
	// Rules are the initial rules.
	Rules []Rule
	// MaxKeys caps live (rule, key) pairs; 0 means crdt.DefaultMaxKeys.
	MaxKeys int
	// MaxMemory is the memory budget of the node, in bytes: the store
	// accounts for at most half of it (crdt.StoreConfig.MaxBytes), the
	// other half left for the Go heap's garbage and the rest of the
	// process. 0 means no budget but MaxKeys.
	MaxMemory int64
	// MaxSkew is how far ahead of this node's clock a peer's clock may run:
	// entries for windows that start later than now+MaxSkew are ignored.
	// Default 2s.
	MaxSkew time.Duration
	// ModeAuthority says who may set rules' modes and which writes of them
	// the node takes from the network (modes.Authority); nil: any node, and
	// a write from another PoP only in its writer's name.
	ModeAuthority *modes.Authority
	// Shards is the number of store shards; 0 means 64.
	Shards int
	// ShareFloor is the least fraction of the limit a side enforcing the share
	// policy may use (0..1); 0 means DefaultShareFloor, negative means none.
	ShareFloor float64
	// ShareStep is how far (a fraction, 0..1) a side's demand during a cut
	// must move from what its share covers before the share follows it;
	// 0 means DefaultShareStep, negative: shares never follow demand.
	ShareStep float64
	// HealHold is how long shares stay enforced after every PoP is heard
	// again, while the other side's counts arrive; 0 means DefaultHealHold.
	HealHold time.Duration
	// IdempotencyTTL is how long a check's decision is remembered for its
	// idempotency key (idempotency.go): 0 means DefaultIdempotencyTTL; at
	// most MaxIdempotencyTTL.
	IdempotencyTTL time.Duration
	// MaxIdempotencyKeys caps the decisions remembered for idempotency
	// keys, about memos.BytesPerEntry bytes each; 0 means a quarter of
	// MaxKeys (of crdt.DefaultMaxKeys when MaxKeys is 0).
	MaxIdempotencyKeys int
	// MaxLeases caps the leases of concurrency rules held (concurrency.go),
	// about LeaseBytes each, and as many members' in-flight counts; 0
	// means a quarter of MaxKeys (of crdt.DefaultMaxKeys when MaxKeys is 0).
	MaxLeases int
	// Seed, when non-zero, makes the node's store deterministic (see
	// crdt.StoreConfig.Seed): the simulator sets it. Zero, for a node holding
	// keys from the network, draws a random one.
	Seed uint64
}

// DefaultMaxSkew is the default Config.MaxSkew.
const DefaultMaxSkew = 2 * time.Second

// Node is one geolimit node's core. All methods are safe for concurrent use;
// Decide scales across cores (the store is sharded).
type Node struct {
	self    identity.Replica
	store   *crdt.Store
	maxSkew int64
	// popSkew, when above 0 and below maxSkew, is how far ahead of this
	// node's clock another PoP's may run (SetPoPSkew).
	popSkew  atomic.Int64
	modeAuth *modes.Authority
	rules    atomic.Pointer[ruleSet]
	epoch    atomic.Uint64

	// applyMu keeps Apply (read side) and forgetting unused replicas in Tick
	// (write side) apart, so an ID is never forgotten between Intern and Merge.
	applyMu    sync.RWMutex
	lastForget atomic.Int64 // when Tick last forgot unused replicas
	// forgotRefused is the store's ReplicasRefused when Tick last forgot.
	forgotRefused atomic.Uint64

	mu      sync.Mutex // serialises SetRules and guards freeIDs, nextID, applied, retired
	freeID  []crdt.RuleID
	nextID  crdt.RuleID
	stats   ApplyStats
	retired map[retiredKey]retiredRule // removed windows whose counts are kept (retired.go)

	shareFloor, shareStep float64
	healHold              int64
	partMu                sync.Mutex // serialises SetUnheard
	part                  atomic.Pointer[partition]
	lastPart              *partition // the latest partition, cleared or not; guarded by partMu
	// told and down are the unheard PoPs last told (SetUnheard) and the
	// PoPs taken for down (SetDown); guarded by partMu.
	told, down map[string]bool
	// pops are the remote PoPs last told by SetPoPs; guarded by partMu.
	pops []string

	// allow is the near-limit allowance by rule scope (allowance.go); nil
	// while off, and always for node scope. Four entries, so that indexing
	// by scope&3 needs no bounds check.
	allow [4]atomic.Pointer[crdt.Allowance]

	unsynced atomic.Bool // see SetSynced

	blocks *blocks.Table // penalty blocks (block.go)

	memos   *memos.Table // decisions remembered for idempotency keys (idempotency.go)
	memoTTL int64

	slots *slotTable // concurrency rules' leases and members' counts (concurrency.go)
	modes modeTable  // rules' modes set at run time (modes.go)

	sparse sparseTable // sparse updates of PoP totals (sparse.go)
	region regionVoice // the region's totals, on its voice PoP (region.go)
}

// New returns a Node with cfg's rules.
func New(cfg Config) (*Node, error) {
	if err := cfg.Self.Validate(); err != nil {
		return nil, fmt.Errorf("pop: self: %w", err)
	}
	if cfg.Self.IsPoP() {
		return nil, fmt.Errorf("pop: self: node name %q is reserved for PoP aggregates", identity.PoPNode)
	}
	if cfg.MaxKeys < 0 {
		return nil, errors.New("pop: max keys: must not be negative")
	}
	if cfg.MaxMemory < 0 {
		return nil, errors.New("pop: max memory: must not be negative")
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = DefaultMaxSkew
	}
	if cfg.MaxSkew < 0 {
		return nil, errors.New("pop: max skew: must not be negative")
	}
	var err error
	if cfg.ShareFloor, err = fractionOption("share floor", cfg.ShareFloor, DefaultShareFloor); err != nil {
		return nil, err
	}
	if cfg.ShareStep, err = fractionOption("share step", cfg.ShareStep, DefaultShareStep); err != nil {
		return nil, err
	}
	if cfg.IdempotencyTTL == 0 {
		cfg.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if cfg.IdempotencyTTL < 0 || cfg.IdempotencyTTL > MaxIdempotencyTTL {
		return nil, errMemoTTL
	}
	if cfg.MaxIdempotencyKeys < 0 {
		return nil, errors.New("pop: max idempotency keys: must not be negative")
	}
	if cfg.MaxIdempotencyKeys == 0 {
		cfg.MaxIdempotencyKeys = max(cmp.Or(cfg.MaxKeys, crdt.DefaultMaxKeys)/4, 1)
	}
	if cfg.MaxLeases < 0 {
		return nil, errors.New("pop: max leases: must not be negative")
	}
	if cfg.MaxLeases == 0 {
		cfg.MaxLeases = max(cmp.Or(cfg.MaxKeys, crdt.DefaultMaxKeys)/4, 1)
	}
	if cfg.HealHold == 0 {
		cfg.HealHold = DefaultHealHold
	}
	n := &Node{
		shareFloor: cfg.ShareFloor,
		shareStep:  cfg.ShareStep,
		healHold:   int64(cfg.HealHold),
		self:       cfg.Self,
		store: crdt.NewStore(crdt.StoreConfig{Self: cfg.Self, MaxKeys: cfg.MaxKeys, Shards: cfg.Shards, Seed: cfg.Seed,
			MaxBytes: int(min(cfg.MaxMemory/2, math.MaxInt))}),
		maxSkew:  int64(cfg.MaxSkew),
		modeAuth: cfg.ModeAuthority,
		blocks:   blocks.NewTable(cmp.Or(cfg.MaxKeys, crdt.DefaultMaxKeys)),
		memos:    memos.NewTable(cfg.MaxIdempotencyKeys),
		memoTTL:  int64(cfg.IdempotencyTTL),
		slots:    newSlotTable(cfg.MaxLeases, cfg.Seed),
	}
	n.sparse.max = cmp.Or(cfg.MaxKeys, crdt.DefaultMaxKeys)
	n.region.sparse.max = n.sparse.max
	n.rules.Store(&ruleSet{byName: map[string]*ruleState{}, byID: map[crdt.RuleID]*ruleState{}, byWire: map[string]*ruleState{}})
	if err := n.SetRules(cfg.Rules); err != nil {
		return nil, err
	}
	return n, nil
}

// fractionOption resolves a 0..1 option: 0 means def, negative means none.
func fractionOption(name string, v, def float64) (float64, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0:
		return 0, nil
	case v > 1:
		return 0, fmt.Errorf("pop: %s: must be at most 1, got %g", name, v)
	}
	return v, nil
}

// ownEpoch reports whether the own PoP's aggregate of epoch e stands for
// counts this node holds per member: the current epoch, or an epoch a
// member started (an epoch is its starter's incarnation) and left for the
// PoP's, whose counts that member sends per node. Only an epoch of members
// that are all gone (the whole PoP restarted) is counted as such. A former
// incarnation of this node is gone: what the node holds of it per node
// (from a state file, Restore) holds no global counts, so its epoch's
// aggregate merges like another PoP's.
func (n *Node) ownEpoch(e uint64) bool {
	if e == n.Link().Epoch() || e == n.self.Incarnation {
		return true
	}
	for _, r := range n.store.Replicas() {
		if r.SamePoP(n.self) && !r.IsPoP() && r.Incarnation == e && r.Node != n.self.Node {
			return true
		}
	}
	return false
}

// MaxSkew returns how far ahead of this node's clock a peer's clock may run
// (Config.MaxSkew).
func (l Link) MaxSkew() time.Duration { return time.Duration(l.n.maxSkew) }

// SetPoPSkew sets how far ahead of this node's clock the clock of another
// PoP may run, below MaxSkew: entries that come from other PoPs (through
// the global-scope transport) for windows that start later than now plus
// d are ignored, as those beyond MaxSkew are; 0 restores MaxSkew. A fleet
// clock that keeps the PoPs' clocks within d of each other sets it
// (package repl): an entry further ahead was counted before its sender's
// clock stepped back, and the sender has moved those counts to the window
// they belong to. Safe for concurrent use.
func (l Link) SetPoPSkew(d time.Duration) { l.n.popSkew.Store(max(int64(d), 0)) }

// aheadOf returns how far ahead of this node's clock a replica heard
// through via may run.
func (n *Node) aheadOf(via Scope) int64 {
	if ps := n.popSkew.Load(); via == ScopeGlobal && ps > 0 && ps < n.maxSkew {
		return ps
	}
	return n.maxSkew
}

// Replicas returns the replica identities whose counts the node holds or
// held (interned; forgotten once no live key references them), self
// included.
func (l Link) Replicas() []identity.Replica { return l.n.store.Replicas() }

// Self returns the node's replica identity.
func (l Link) Self() identity.Replica { return l.n.self }

// SetEpoch sets the PoP epoch the members agreed on: the incarnation of the
// PoP's aggregate this node publishes (Batch.PoP) and ignores when it comes
// back (Apply). 0 means none yet: no aggregate is published.
//
// Counts merged earlier under the own PoP's aggregate of that epoch (relayed
// by another PoP before this node knew the epoch was its PoP's current one)
// are dropped: the node holds the same counts per member.
func (l Link) SetEpoch(epoch uint64) {
	n := l.n
	n.epoch.Store(epoch)
	if epoch != 0 {
		n.applyMu.Lock()
		n.store.DropReplica(identity.PoPReplica(n.self.PoPID, epoch))
		n.applyMu.Unlock()
	}
}

// Epoch returns the PoP epoch set by SetEpoch.
func (l Link) Epoch() uint64 { return l.n.epoch.Load() }

// Tick does periodic housekeeping at now: it drops keys whose windows have
// all passed and, once many replica identities have piled up, the ones no
// live key references. Call it every second or so.
func (n *Node) Tick(now int64) {
	n.store.Sweep(n.sweepIndex(now))
	for _, p := range features {
		p.sweep(n, now)
	}
	refused := n.store.ReplicasRefused()
	if (n.store.ReplicaCount() > forgetReplicasAt || refused != n.forgotRefused.Load()) &&
		now-n.lastForget.Load() >= int64(forgetReplicasEvery) {
		n.lastForget.Store(now)
		n.forgotRefused.Store(refused)
		n.applyMu.Lock()
		n.store.ForgetReplicas()
		n.applyMu.Unlock()
	}
}

// Above forgetReplicasAt interned replicas (every restart of every node adds
// one), or when the store refused one (a sender past its part of the table,
// see crdt.StoreConfig.MaxIncarnations), Tick drops those no live key
// references, at most once per forgetReplicasEvery.
const (
	forgetReplicasAt    = 1024
	forgetReplicasEvery = time.Minute
)

// Stats are a Node's cumulative counters.
type Stats struct {
	Store crdt.StoreStats
	// Applied sums the ApplyStats of every Apply so far.
	Applied ApplyStats
	// KeysByRule is the number of live keys per rule name.
	KeysByRule map[string]int
	// Blocks is the number of penalty blocks held (ended ones until Tick).
	Blocks int
	// BlocksFull counts new penalty blocks dropped because the block table
	// was full (its cap is MaxKeys).
	BlocksFull uint64
	// Memos are the table of decisions remembered for idempotency keys:
	// its size, cap and evictions.
	Memos memos.Stats
	// Slots are the concurrency rules' leases and counters.
	Slots SlotStats
	// InFlight is the slots this node's leases hold per concurrency rule
	// of the current table (0 for one holding none).
	InFlight map[string]uint64
	// Modes counts the rules' modes set at run time and received.
	Modes ModeStats
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	rs := n.rules.Load()
	st := Stats{Store: n.store.Stats(), KeysByRule: map[string]int{}, Blocks: n.blocks.Len(), BlocksFull: n.blocks.Full(),
		Memos: n.memos.Stats(), Slots: n.slots.stats(), InFlight: n.inFlightByRule(), Modes: n.modeStats()}
	for _, r := range rs.sorted {
		st.KeysByRule[r.Name] = 0
	}
	for id, c := range n.store.KeysByRule() {
		if r := rs.byID[id]; r != nil && !r.sub {
			st.KeysByRule[r.Name] = c
		}
	}
	n.mu.Lock()
	st.Applied = n.stats
	n.mu.Unlock()
	return st
}
