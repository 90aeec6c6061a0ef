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
// replica (crdt.PoPReplica, in the PoP's epoch) carries the PoP total of each
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
// Near a limit a node spends only its share of the headroom while its own
// admits are unseen by the others (the near-limit allowance, allowance.go):
// the replication layer tells it the lag and the number of replicas
// (SetAllowance), and decisions far from a limit are not affected.
package pop

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
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
	Self crdt.Replica
	// Rules are the initial rules.
	Rules []Rule
	// MaxKeys caps live (rule, key) pairs; 0 means crdt.DefaultMaxKeys.
	MaxKeys int
	// MaxSkew is how far ahead of this node's clock a peer's clock may run:
	// entries for windows that start later than now+MaxSkew are ignored.
	// Default 2s.
	MaxSkew time.Duration
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
	// Seed, when non-zero, makes the node's store deterministic (see
	// crdt.StoreConfig.Seed): the simulator sets it. Zero, for a node holding
	// keys from the network, draws a random one.
	Seed uint64
}

// DefaultMaxSkew is the default Config.MaxSkew.
const DefaultMaxSkew = 2 * time.Second

// Decision is the outcome of Decide.
type Decision struct {
	// Allowed reports whether the request may proceed. Shadow rules always allow.
	Allowed bool
	// ShadowDenied is set when a shadow rule would have denied the request.
	ShadowDenied bool
	// Untracked is set when the key is new and the store had no room for it:
	// the request was decided, and counted when admitted, by the one counter
	// the rule's keys without room share (see crdt.Store), not by a count of
	// its own.
	Untracked bool
	// Blocked is set when the key is in the rule's penalty box (Rule.BlockFor,
	// block.go): denied (in shadow mode: would be) until RetryAfter from now.
	Blocked bool
	// BlockStarted is set when this decision put the key in the penalty box.
	BlockStarted bool
	// Unsure says why a rule with DenyUnsure denied a request it could not
	// judge (unsure.go); UnsureNone otherwise.
	Unsure Unsure
	// Limit is the binding window's limit for the request: the rule's, or
	// the one an override or tier gave the key.
	Limit uint64
	// Remaining is what is left of the limit after this request (see window.Result).
	Remaining uint64
	// Reset is the time until the whole limit is available again if no other
	// request arrives.
	Reset time.Duration
	// RetryAfter is 0 when allowed, else the time until a request of the same
	// cost would fit if no other request arrives.
	RetryAfter time.Duration
	// Binding is the index, in Rule.Windows, of the window the other fields
	// speak of: of a denied request, the denying window with the longest
	// wait; of an admitted one, the window with the least remaining. 0 for
	// a rule of one window.
	Binding uint8
	// Limits are the limits per window (in the order of Rule.Windows) that
	// an override or tier gave the request, nil when the rule's own applied.
	// Read only: shared with the rule table.
	Limits []uint64
}

// Batch is what a node sends. Local goes to the own PoP's members: own counts
// of pop- and global-scope rules, Sender = Self, Epoch = the node's epoch.
// PoP goes to the other PoPs: PoP totals of global-scope rules for the keys
// the node publishes (owns), Sender = crdt.PoPReplica(region, pop, epoch).
// PoP is empty while the epoch is 0. Both carry SentAt and Epoch; either may
// have no entries.
type Batch struct {
	Local, PoP crdt.Delta
}

// ApplyStats counts what Apply did with a delta's entries.
type ApplyStats struct {
	Merged, Unchanged, Stale, Ahead, Full int
	// UnknownRule: the entry names a rule this node does not have.
	UnknownRule int
	// WrongScope: a node-scope rule, a pop-scope rule from outside the PoP, or
	// a sender that may not use the transport: via ScopePoP only other nodes of
	// the own PoP, via ScopeGlobal only PoP aggregates.
	WrongScope int
	// BadEntry: an empty or oversized key.
	BadEntry int
	// Echo: the delta came from this very replica, or is this PoP's own
	// aggregate of the current epoch.
	Echo int
	// Clamped: entries whose count was above the rule's limit, more than
	// one replica can admit in a window; they were merged as the limit.
	// These entries are also counted by their merge outcome.
	Clamped int
	// Blocks counts what was done with penalty blocks (block.go).
	Blocks BlockApplyStats
}

// Rejected is the number of entries Apply refused for a reason that points
// at a misconfigured or hostile sender.
func (a ApplyStats) Rejected() int { return a.UnknownRule + a.WrongScope + a.BadEntry }

// Add adds b's counts to a's.
func (a *ApplyStats) Add(b ApplyStats) {
	a.Merged += b.Merged
	a.Unchanged += b.Unchanged
	a.Stale += b.Stale
	a.Ahead += b.Ahead
	a.Full += b.Full
	a.UnknownRule += b.UnknownRule
	a.WrongScope += b.WrongScope
	a.BadEntry += b.BadEntry
	a.Echo += b.Echo
	a.Clamped += b.Clamped
	a.Blocks.add(b.Blocks)
}

// Node is one geolimit node's core. All methods are safe for concurrent use;
// Decide scales across cores (the store is sharded).
type Node struct {
	self    crdt.Replica
	store   *crdt.Store
	maxSkew int64
	rules   atomic.Pointer[ruleSet]
	epoch   atomic.Uint64

	// applyMu keeps Apply (read side) and forgetting unused replicas in Tick
	// (write side) apart, so an ID is never forgotten between Intern and Merge.
	applyMu    sync.RWMutex
	lastForget atomic.Int64 // when Tick last forgot unused replicas

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

	// allow is the near-limit allowance by rule scope (allowance.go); nil
	// while off, and always for node scope. Four entries, so that indexing
	// by scope&3 needs no bounds check.
	allow [4]atomic.Pointer[crdt.Allowance]

	unsynced atomic.Bool // see SetSynced

	blocks *crdt.Blocks // penalty blocks (block.go)
}

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
	// dropped: the rule was removed and its retired counts dropped; its ID
	// may serve another rule (handle.go).
	dropped atomic.Bool
	// wire is the window's name on the wire (Rule.WireName).
	wire string
	// clamp is the largest limit the window gives any key (Apply's clamp).
	clamp uint64
	// multi: several windows, overrides or tiers; decided by decideMulti
	// (limits.go) with wins, lims and maxCost.
	multi   bool
	sub     bool // a further window, reached through its rule's wins only
	wins    []*ruleState
	lims    *limitTable
	maxCost uint64
}

// winCache remembers the rule's current window so that the hot path does not
// pay a 64-bit division per decision.
type winCache struct{ index, start int64 }

// split is window.Split(now, r.width), cached per window.
func (r *ruleState) split(now int64) (index, elapsed int64) {
	if c := r.cur.Load(); c != nil && now >= c.start && now-c.start < r.width {
		return c.index, now - c.start
	}
	index, elapsed = window.Split(now, r.width)
	r.cur.Store(&winCache{index: index, start: now - elapsed})
	return index, elapsed
}

// New returns a Node with cfg's rules.
func New(cfg Config) (*Node, error) {
	if err := cfg.Self.Validate(); err != nil {
		return nil, fmt.Errorf("pop: self: %w", err)
	}
	if cfg.Self.IsPoP() {
		return nil, fmt.Errorf("pop: self: node name %q is reserved for PoP aggregates", crdt.PoPNode)
	}
	if cfg.MaxKeys < 0 {
		return nil, errors.New("pop: max keys: must not be negative")
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
	if cfg.HealHold == 0 {
		cfg.HealHold = DefaultHealHold
	}
	n := &Node{
		shareFloor: cfg.ShareFloor,
		shareStep:  cfg.ShareStep,
		healHold:   int64(cfg.HealHold),
		self:       cfg.Self,
		store:      crdt.NewStore(crdt.StoreConfig{Self: cfg.Self, MaxKeys: cfg.MaxKeys, Shards: cfg.Shards, Seed: cfg.Seed}),
		maxSkew:    int64(cfg.MaxSkew),
		blocks:     crdt.NewBlocks(cmp.Or(cfg.MaxKeys, crdt.DefaultMaxKeys)),
	}
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
	if e == n.Epoch() || e == n.self.Incarnation {
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
func (n *Node) MaxSkew() time.Duration { return time.Duration(n.maxSkew) }

// Replicas returns the replica identities whose counts the node holds or
// held (interned; forgotten once no live key references them), self
// included.
func (n *Node) Replicas() []crdt.Replica { return n.store.Replicas() }

// Self returns the node's replica identity.
func (n *Node) Self() crdt.Replica { return n.self }

// SetEpoch sets the PoP epoch the members agreed on: the incarnation of the
// PoP's aggregate this node publishes (Batch.PoP) and ignores when it comes
// back (Apply). 0 means none yet: no aggregate is published.
//
// Counts merged earlier under the own PoP's aggregate of that epoch (relayed
// by another PoP before this node knew the epoch was its PoP's current one)
// are dropped: the node holds the same counts per member.
func (n *Node) SetEpoch(epoch uint64) {
	n.epoch.Store(epoch)
	if epoch != 0 {
		n.applyMu.Lock()
		n.store.DropReplica(crdt.PoPReplica(n.self.Region, n.self.PoP, epoch))
		n.applyMu.Unlock()
	}
}

// Epoch returns the PoP epoch set by SetEpoch.
func (n *Node) Epoch() uint64 { return n.epoch.Load() }

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
		rs.guarded = r.BlockFor != 0 || r.OnUnsure != AllowUnsure
		for _, w := range rs.windows() {
			if o := old.window(r.Name, w.Window); o != nil && !kept[o.id] {
				w.id = o.id
				kept[o.id] = true
			} else if id, ok := n.unretire(r.Name, w.Window); ok {
				w.id = id
			} else {
				id, err := n.allocID()
				if err != nil {
					return err
				}
				w.id = id
			}
		}
		for _, w := range rs.windows() {
			next.byID[w.id] = w
			next.byWire[w.wire] = w
			n.store.SetProtect(w.id, protectThreshold(w.Limit))
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
		}
	}
	n.rules.Store(next)
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

func (n *Node) allocID() (crdt.RuleID, error) {
	if k := len(n.freeID); k > 0 {
		id := n.freeID[k-1]
		n.freeID = n.freeID[:k-1]
		return id, nil
	}
	if int(n.nextID) >= crdt.MaxRules {
		return 0, fmt.Errorf("pop: more than %d rules", crdt.MaxRules)
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

// Decide decides a request of cost for key under rule at now (Unix
// nanoseconds) and counts it when admitted. It never blocks on replication
// and does not allocate.
func (n *Node) Decide(now int64, rule, key string, cost uint64) (Decision, error) {
	return n.decide(now, rule, key, cost, true)
}

// Peek decides like Decide but counts nothing: what Decide would answer now.
func (n *Node) Peek(now int64, rule, key string, cost uint64) (Decision, error) {
	return n.decide(now, rule, key, cost, false)
}

func (n *Node) decide(now int64, rule, key string, cost uint64, count bool) (d Decision, err error) {
	r, ok := n.rules.Load().get(rule)
	if !ok {
		return Decision{}, ErrUnknownRule
	}
	err = n.decideRule(&d, now, r, key, cost, count)
	return
}

// checkRequest checks what every rule asks of a request: a key of 1 to
// crdt.MaxKeyLen bytes and a cost of at least 1.
func checkRequest(key string, cost uint64) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > crdt.MaxKeyLen:
		return ErrKeyTooLong
	case cost < 1:
		return ErrBadCost
	}
	return nil
}

// decideRule decides for rule r of some rule table snapshot, into *d (which
// it overwrites whole). Results go through pointers on this path: a
// returned struct is copied with wide loads of its narrow stores, which
// stalls on store forwarding, and three such copies cost a decision more
// than its look-up in cache.
func (n *Node) decideRule(d *Decision, now int64, r *ruleState, key string, cost uint64, count bool) (err error) {
	var ok bool
	if err = checkRequest(key, cost); err != nil {
		*d = Decision{}
		return err
	}
	switch {
	case r.multi:
		*d, err = n.decideMulti(now, r, key, "", cost, count)
		return err
	case cost > r.Limit:
		*d = Decision{}
		return ErrCostOverLimit
	}
	if r.guarded {
		if g, done := n.guard(now, r, key); done {
			*d = shadowed(r, g)
			return nil
		}
	}
	h := n.store.Hash(r.id, key) // the slot's line comes in meanwhile
	idx, el := r.split(now)
	limit := r.Limit
	var sh *share
	if r.OnPartition == Share && r.Scope == ScopeGlobal && n.part.Load() != nil {
		var lim float64
		if lim, sh, ok = n.shareLimit(r, key, now, idx, el); ok {
			limit = uint64(min(lim, float64(r.Limit)))
			if sh.fresh && r.OnUnsure == DenyUnsure {
				*d = shadowed(r, unsureDecision(r, UnsureNoHistory))
				return nil
			}
		}
	}
	var res crdt.AdmitResult
	if cost > limit {
		// The share left to this side cannot hold the request; retry once the
		// partition is over, or a window later at the earliest.
		res = crdt.AdmitResult{Result: window.Result{Remaining: limit, RetryAfter: r.width, Reset: r.width}}
	} else {
		at := crdt.Now{Index: idx, Elapsed: el, Width: r.width}
		if count && r.OnUnsure == DenyUnsure {
			// Fail closed before counting: a key the store may have no
			// room for is denied, and nothing goes to the rule's counter
			// of keys without room.
			if n.store.AdmitSplitHashed(&res, h, r.id, key, at, limit, cost, false, nil); res.Untracked {
				*d = unsureDecision(r, UnsureStoreFull)
				d.Untracked = true
				*d = shadowed(r, *d)
				return nil
			}
		}
		n.store.AdmitSplitHashed(&res, h, r.id, key, at, limit, cost, count, n.allow[r.Scope&3].Load())
	}
	if sh != nil && count {
		sh.record(idx, cost)
	}
	// Field by field: a composite literal is built on the stack and copied.
	d.Allowed, d.ShadowDenied, d.Untracked = res.Allowed, false, res.Untracked
	d.Blocked, d.BlockStarted, d.Unsure = false, false, UnsureNone
	d.Limit, d.Remaining = r.Limit, min(res.Remaining, limit)
	d.Reset, d.RetryAfter = time.Duration(res.Reset), time.Duration(res.RetryAfter)
	d.Binding, d.Limits = 0, nil
	if r.guarded {
		n.afterGuard(now, r, key, count, d)
	}
	if !d.Allowed && r.Mode == Shadow {
		d.Allowed, d.ShadowDenied = true, true
	}
	return nil
}

// shadowed turns a shadow rule's denial into an admission that says it
// would have denied.
func shadowed(r *ruleState, d Decision) Decision {
	if !d.Allowed && r.Mode == Shadow {
		d.Allowed, d.ShadowDenied = true, true
	}
	return d
}

// Apply merges a delta received from another replica through a transport of
// the given scope. Via ScopePoP come the own PoP's members (another node of
// the own PoP, any incarnation, never an aggregate), with pop- and
// global-scope rules. Via ScopeGlobal come the other PoPs' aggregates (a
// sender whose Node is crdt.PoPNode), with global-scope rules only; a node
// sender there is refused, for a PoP speaks to others only through its
// aggregate. The own PoP's aggregate of the current epoch is an echo of what
// the members already hold per node and is ignored; of another epoch (a
// former one, relayed back after the whole PoP restarted) it merges like a
// foreign PoP's count. Senders that may not use the transport are refused
// whole (WrongScope); bad entries are skipped and counted, the rest still
// merge.
func (n *Node) Apply(now int64, d *crdt.Delta, via Scope) ApplyStats {
	return n.ApplyFrom(now, d, via, nil)
}

// ApplyFrom is Apply with from, when not nil, caching the store's ID of the
// sender: a caller that keeps one per remote PoP saves a look-up per
// message. Calls that share a cache must not run concurrently.
func (n *Node) ApplyFrom(now int64, d *crdt.Delta, via Scope, from *crdt.InternCache) ApplyStats {
	var st ApplyStats
	defer func() {
		n.mu.Lock()
		n.stats.Add(st)
		n.mu.Unlock()
	}()
	if d.Sender == n.self {
		st.Echo = len(d.Entries) + len(d.Blocks)
		return st
	}
	if !senderFits(n.self, d.Sender, via) {
		st.WrongScope = len(d.Entries) + len(d.Blocks)
		return st
	}
	// The epoch is read under applyMu, so an entry of the aggregate SetEpoch
	// drops is either refused here or merged before SetEpoch drops it.
	n.applyMu.RLock()
	defer n.applyMu.RUnlock()
	if via == ScopeGlobal && d.Sender.SamePoP(n.self) && n.ownEpoch(d.Sender.Incarnation) {
		st.Echo = len(d.Entries) + len(d.Blocks)
		return st
	}
	n.applyBlocks(now, d, via, &st)
	var rep crdt.ReplicaID
	var ok bool
	if from != nil {
		rep, ok = n.store.InternCached(d.Sender, from)
	} else {
		rep, ok = n.store.Intern(d.Sender)
	}
	if !ok {
		st.Full = len(d.Entries)
		return st
	}
	rs := n.rules.Load()
	// Entries come grouped by rule: a rule and its windows are looked up
	// once per run of its entries. In a large store nearly every entry's
	// shard, slot and list of remote counts are cache misses; they are
	// taken together, a block of entries at a time: every key is hashed
	// and its shard prefetched, then its slot, then the entries merge.
	var hs [applyBlock]uint64
	for i := 0; i < len(d.Entries); {
		wire := d.Entries[i].Rule
		j := i + 1
		for j < len(d.Entries) && j-i < applyBlock && d.Entries[j].Rule == wire {
			j++
		}
		run := d.Entries[i:j]
		i = j
		r, ok := rs.getWire(wire)
		if !ok {
			st.UnknownRule += len(run)
			continue
		}
		if r.Scope == ScopeNode || (r.Scope == ScopePoP && via != ScopePoP) {
			st.WrongScope += len(run)
			continue
		}
		for k := range run {
			if len(run[k].Key) <= crdt.MaxKeyLen { // longer ones are refused
				hs[k] = n.store.KeyHash(r.id, run[k].Key)
				n.store.PrefetchShard(hs[k])
			}
		}
		for k := range run {
			if len(run[k].Key) <= crdt.MaxKeyLen {
				n.store.PrefetchSlot(hs[k])
			}
		}
		idx, _ := window.Split(now, r.width)
		limitIdx, _ := window.Split(now+n.maxSkew, r.width)
		for k := range run {
			n.mergeAt(idx, limitIdx, r, rep, &run[k], hs[k], &st)
		}
	}
	return st
}

// applyBlock is how many entries Apply prefetches together.
const applyBlock = 8

// PrefetchDelta starts fetching the store's memory that applying d will
// read first (the shards of its first entries), without waiting for it,
// so that a caller with other work to do before ApplyFrom (its own state of
// the sender) overlaps the two.
func (n *Node) PrefetchDelta(d *crdt.Delta) {
	if len(d.Entries) == 0 {
		return
	}
	wire := d.Entries[0].Rule
	r, ok := n.rules.Load().getWire(wire)
	if !ok {
		return
	}
	for i := range min(len(d.Entries), applyBlock) {
		if e := &d.Entries[i]; e.Rule == wire && len(e.Key) <= crdt.MaxKeyLen {
			n.store.PrefetchShard(n.store.KeyHash(r.id, e.Key))
		}
	}
}

// mergeEntry merges one entry of replica rep for rule r (whose scope the
// caller checked), counting the outcome in st. Requires applyMu read-held.
func (n *Node) mergeEntry(now int64, r *ruleState, rep crdt.ReplicaID, e *crdt.Entry, st *ApplyStats) {
	idx, _ := window.Split(now, r.width)
	limitIdx, _ := window.Split(now+n.maxSkew, r.width)
	n.mergeAt(idx, limitIdx, r, rep, e, n.store.Hash(r.id, e.Key), st)
}

// mergeAt is mergeEntry with r's current window index and the last index a
// peer may be ahead at (now + max skew) already computed, for a run of
// entries of one rule, and h the store's Hash of the entry's key.
func (n *Node) mergeAt(idx, limitIdx int64, r *ruleState, rep crdt.ReplicaID, e *crdt.Entry, h uint64, st *ApplyStats) {
	if len(e.Key) == 0 || len(e.Key) > crdt.MaxKeyLen {
		st.BadEntry++
		return
	}
	if e.Window > limitIdx {
		st.Ahead++
		return
	}
	count := e.Count
	if count > r.clamp {
		// No replica admits more than the limit in a window (a denied
		// request spends nothing), so a larger count is a bug or an
		// attack: it must not lock the key beyond what one replica
		// could, two windows at most. With overrides or tiers, the
		// largest limit the window gives any key.
		count = r.clamp
		st.Clamped++
	}
	switch n.store.MergeHashed(h, r.id, e.Key, idx, e.Window, rep, count) {
	case crdt.Merged:
		st.Merged++
	case crdt.Unchanged:
		st.Unchanged++
	case crdt.Stale:
		st.Stale++
	case crdt.Ahead:
		st.Ahead++
	case crdt.Full:
		st.Full++
	case crdt.Self:
		st.Echo++
	}
}

// senderFits reports whether sender may send through a transport of scope
// via to a node of self's PoP: members via ScopePoP, aggregates via
// ScopeGlobal.
func senderFits(self, sender crdt.Replica, via Scope) bool {
	if sender.Validate() != nil {
		return false
	}
	switch via {
	case ScopePoP:
		return sender.SamePoP(self) && !sender.IsPoP()
	case ScopeGlobal:
		return sender.IsPoP()
	}
	return false
}

// Flush returns what changed since the last Flush, stamped with now: in
// Local the own counts that changed, in PoP the PoP totals that changed of
// the keys owns accepts (nil: every key). A PoP total changes with an own
// count and when a member's count arrives, so PoP may hold a key this node
// did not count. The change marks are cleared whether or not a PoP total was
// published (epoch 0, a key owned by another member): the member that owns a
// key publishes it, and AntiEntropy repairs a change of ownership. owns is
// called without any lock of the node held. Node-scope rules produce nothing.
func (n *Node) Flush(now int64, owns func(key string) bool) Batch {
	return n.FlushTo(now, owns, true)
}

// FlushTo is Flush for a node that may have no member to tell: with local
// false, Batch.Local is left empty (its change marks are cleared all the
// same), which spares a node alone in its PoP building it.
func (n *Node) FlushTo(now int64, owns func(key string) bool, local bool) Batch {
	rs := n.rules.Load()
	b := n.batch(now)
	pub := b.PoP.Epoch != 0
	n.store.FlushAt(now, n.flushHorizon(), func(e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.Scope == ScopeNode {
			return
		}
		if local && e.Changed&crdt.OwnChanged != 0 && e.Count > 0 {
			b.Local.Entries = append(b.Local.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
		}
		if pub && r.Scope == ScopeGlobal && e.Changed&crdt.PoPChanged != 0 && e.PoP > 0 && (owns == nil || owns(e.Key)) {
			b.PoP.Entries = append(b.PoP.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.PoP})
		}
	})
	n.flushBlocks(rs, &b, local, pub)
	return b
}

// batch returns an empty Batch stamped with now and the current epoch.
func (n *Node) batch(now int64) Batch {
	ep := n.Epoch()
	return Batch{
		Local: crdt.Delta{Sender: n.self, SentAt: now, Epoch: ep},
		PoP:   crdt.Delta{Sender: crdt.PoPReplica(n.self.Region, n.self.PoP, ep), SentAt: now, Epoch: ep},
	}
}

// Pending returns about how many keys changed since the last Flush, so that
// a caller can flush early when a batch reaches its size cap.
func (n *Node) Pending() int { return n.store.Pending() }

// AntiEntropy returns every own count of the live windows (Local) and every
// PoP total of the live windows of the keys owns accepts (PoP; nil owns
// every key), split like Flush: sent periodically and on join or reconnect,
// it repairs lost final deltas, teaches new or restarted peers and
// republishes the keys whose ownership moved. owns is called without any lock
// of the node held.
func (n *Node) AntiEntropy(now int64, owns func(key string) bool) Batch {
	return n.AntiEntropyPart(now, owns, 0, 1)
}

// antiEntropyPartKeys is about how many keys one part of a paced
// anti-entropy round walks (AntiEntropyParts).
const antiEntropyPartKeys = 4096

// AntiEntropyParts returns in how many parts a paced anti-entropy round of
// the store's current size is best cut: parts of about 4096 keys, so that
// one part walks, encodes and sends in a few milliseconds; 1 for a small
// store.
func (n *Node) AntiEntropyParts() int { return n.store.Parts(antiEntropyPartKeys) }

// AntiEntropyPart is AntiEntropy over part of parts (0 <= part < parts):
// the parts 0 to parts-1 of one parts send every count AntiEntropy sends,
// each key's in exactly one part, and the penalty blocks with part 0. A
// caller spreads the parts over its interval so that a large store's round
// is not one burst of work that stalls the decisions sharing its cores.
func (n *Node) AntiEntropyPart(now int64, owns func(key string) bool, part, parts int) Batch {
	rs := n.rules.Load()
	b := n.batch(now)
	idx := n.indexFunc(rs, now)
	parts = max(parts, 1)
	// The store's key count would bound a part's entries (two windows a
	// key), but most of a large store's keys are other replicas' and send
	// nothing here, and a batch grown by append copies itself several
	// times over. The entries are gathered in a scratch buffer kept
	// between rounds and the batch gets an exact copy.
	sp := aeScratch.Get().(*[]crdt.Entry)
	buf := (*sp)[:0]
	n.store.OwnPart(idx, part, parts, func(e crdt.FlushEntry) {
		if r := rs.byID[e.Rule]; r != nil && r.Scope != ScopeNode && e.Count > 0 {
			buf = append(buf, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
		}
	})
	b.Local.Entries, buf = exactCopy(buf), buf[:0]
	if part == 0 {
		n.antiEntropyBlocks(rs, now, &b, owns)
	}
	if b.PoP.Epoch != 0 {
		n.store.TotalsPart(idx, part, parts, func(e crdt.FlushEntry) {
			if r := rs.byID[e.Rule]; r != nil && r.Scope == ScopeGlobal && e.PoP > 0 && (owns == nil || owns(e.Key)) {
				buf = append(buf, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.PoP})
			}
		})
		b.PoP.Entries = exactCopy(buf)
	}
	*sp = buf[:0]
	aeScratch.Put(sp)
	return b
}

// aeScratch holds the buffers an anti-entropy part gathers its entries in.
var aeScratch = sync.Pool{New: func() any { return new([]crdt.Entry) }}

// exactCopy returns a copy of es with no spare capacity (nil for none) and
// clears es, so that a scratch buffer keeps no keys alive.
func exactCopy(es []crdt.Entry) []crdt.Entry {
	if len(es) == 0 {
		return nil
	}
	out := append(make([]crdt.Entry, 0, len(es)), es...)
	clear(es)
	return out
}

// State returns every count this node holds in the live windows of pop and
// global rules, own and remote, one delta per owning replica (sorted by
// replica, each with SentAt now and Epoch the node's epoch; no empty ones):
// the push/pull state a joining or restarted member of the PoP merges to
// learn the live windows at once. The receiver applies the deltas of
// aggregates (Sender.IsPoP()) via ScopeGlobal and the others via ScopePoP.
func (n *Node) State(now int64) []crdt.Delta {
	rs := n.rules.Load()
	ep := n.Epoch()
	byRep := map[crdt.ReplicaID]*crdt.Delta{}
	n.store.Entries(n.indexFunc(rs, now), func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.Scope == ScopeNode {
			return
		}
		d := byRep[rep]
		if d == nil {
			d = &crdt.Delta{SentAt: now, Epoch: ep}
			byRep[rep] = d
		}
		d.Entries = append(d.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
	})
	out := make([]crdt.Delta, 0, len(byRep)+1)
	if blocks := n.liveBlocks(rs, now); len(blocks) > 0 {
		// Blocks have no owner: they travel with this node's own counts.
		self := crdt.Delta{Sender: n.self, SentAt: now, Epoch: ep}
		for rep, d := range byRep {
			if n.store.Replica(rep) == n.self {
				self = *d
				delete(byRep, rep)
			}
		}
		self.Sender, self.Blocks = n.self, blocks
		out = append(out, self)
	}
	for rep, d := range byRep {
		d.Sender = n.store.Replica(rep)
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sender.String() < out[j].Sender.String() })
	return out
}

func (n *Node) indexFunc(rs *ruleSet, now int64) func(crdt.RuleID) int64 {
	return func(id crdt.RuleID) int64 {
		r := rs.byID[id]
		if r == nil {
			return 1<<63 - 1 // unknown rule: nothing of it is live
		}
		idx, _ := window.Split(now, r.width)
		return idx
	}
}

// Tick does periodic housekeeping at now: it drops keys whose windows have
// all passed and, once many replica identities have piled up, the ones no
// live key references. Call it every second or so.
func (n *Node) Tick(now int64) {
	n.store.Sweep(n.sweepIndex(now))
	n.blocks.Sweep(now)
	if n.store.ReplicaCount() > forgetReplicasAt && now-n.lastForget.Load() >= int64(forgetReplicasEvery) {
		n.lastForget.Store(now)
		n.applyMu.Lock()
		n.store.ForgetReplicas()
		n.applyMu.Unlock()
	}
}

// Above forgetReplicasAt interned replicas (every restart of every node adds
// one), Tick drops those no live key references, at most once per
// forgetReplicasEvery.
const (
	forgetReplicasAt    = 1024
	forgetReplicasEvery = time.Minute
)

// KeyView is one key's state as this node sees it.
type KeyView struct {
	Rule     string
	Key      string
	Limit    uint64
	Estimate float64
	Windows  []crdt.WindowView
	// BlockedUntil is when the key's penalty block ends (Unix nanoseconds),
	// 0 when it is not blocked.
	BlockedUntil int64
	// More are the further windows of a rule of several, in the order of
	// Rule.More; Limit, Estimate and Windows above are the first window's.
	More []WindowKeyView
}

// WindowKeyView is one further window of a KeyView.
type WindowKeyView struct {
	Window   time.Duration
	Limit    uint64
	Estimate float64
	Windows  []crdt.WindowView
}

// View returns one key's live windows with per-replica counts and the
// current estimate, without counting anything.
func (n *Node) View(now int64, rule, key string) (KeyView, error) {
	r, ok := n.rules.Load().byName[rule]
	switch {
	case !ok:
		return KeyView{}, ErrUnknownRule
	case len(key) == 0:
		return KeyView{}, ErrEmptyKey
	case len(key) > crdt.MaxKeyLen:
		return KeyView{}, ErrKeyTooLong
	}
	first := n.viewWindow(now, r, key)
	v := KeyView{Rule: rule, Key: key, Limit: r.Limit, Estimate: first.Estimate, Windows: first.Windows}
	if r.multi {
		for _, w := range r.wins[1:] {
			v.More = append(v.More, n.viewWindow(now, w, key))
		}
	}
	if until := n.blocks.Until(r.id, key); until > now {
		v.BlockedUntil = until
	}
	return v, nil
}

// viewWindow is View of one window of a rule.
func (n *Node) viewWindow(now int64, w *ruleState, key string) WindowKeyView {
	idx, el := window.Split(now, w.width)
	v := WindowKeyView{Window: w.Window, Limit: w.Limit, Windows: []crdt.WindowView{}}
	if ws, ok := n.store.View(w.id, key, idx); ok {
		v.Windows = ws
	}
	var prev, curr uint64
	for _, wv := range v.Windows {
		switch wv.Index {
		case idx - 1:
			prev = wv.Total
		case idx:
			curr = wv.Total
		}
	}
	v.Estimate = window.Estimate(prev, curr, el, w.width)
	return v
}

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
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	rs := n.rules.Load()
	st := Stats{Store: n.store.Stats(), KeysByRule: map[string]int{}, Blocks: n.blocks.Len(), BlocksFull: n.blocks.Full()}
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
