// Package pop is the geolimit node core: rules, local decisions, and the
// merging and production of replication deltas.
//
// Like etcd's raft core, it is synchronous and deterministic. It starts no
// goroutine, reads no clock and knows nothing about sockets: the caller passes
// the time (Unix nanoseconds) and moves the deltas. The daemon and the
// simulator drive the very same Node.
//
//	n, _ := pop.New(pop.Config{Self: self, Rules: rules})
//	d, err := n.Decide(clk.Now(), "api", "203.0.113.7", 1)
//	for _, out := range n.Flush(clk.Now()) { send(out.Scope, out.Delta) }
//	n.Apply(clk.Now(), received, pop.ScopeGlobal)
//	n.Tick(clk.Now()) // every second or so: drops expired keys
package pop

import (
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
	// ShareStep is how much a side's share may grow per window when its
	// traffic grew during the cut (0..1); 0 means DefaultShareStep, negative none.
	ShareStep float64
	// HealHold is how long shares stay enforced after every PoP is heard
	// again, while the other side's counts arrive; 0 means DefaultHealHold.
	HealHold time.Duration
}

// DefaultMaxSkew is the default Config.MaxSkew.
const DefaultMaxSkew = 2 * time.Second

// Decision is the outcome of Decide.
type Decision struct {
	// Allowed reports whether the request may proceed. Shadow rules always allow.
	Allowed bool
	// ShadowDenied is set when a shadow rule would have denied the request.
	ShadowDenied bool
	// Untracked is set when the key is new and the store is full: the request
	// was decided as a key with no history and not counted.
	Untracked bool
	// Limit is the rule's limit.
	Limit uint64
	// Remaining is what is left of the limit after this request (see window.Result).
	Remaining uint64
	// Reset is the time until the whole limit is available again if no other
	// request arrives.
	Reset time.Duration
	// RetryAfter is 0 when allowed, else the time until a request of the same
	// cost would fit if no other request arrives.
	RetryAfter time.Duration
}

// Outbound is a delta to send: ScopePoP deltas go to the PoP's members only;
// ScopeGlobal deltas go to the PoP's members and to every other PoP.
type Outbound struct {
	Scope Scope
	Delta crdt.Delta
}

// ApplyStats counts what Apply did with a delta's entries.
type ApplyStats struct {
	Merged, Unchanged, Stale, Ahead, Full int
	// UnknownRule: the entry names a rule this node does not have.
	UnknownRule int
	// WrongScope: a node-scope rule, or a pop-scope rule from outside the PoP.
	WrongScope int
	// BadEntry: an empty or oversized key.
	BadEntry int
	// Echo: the delta came from this very replica.
	Echo int
}

// Rejected is the number of entries Apply refused for a reason that points
// at a misconfigured or hostile sender.
func (a ApplyStats) Rejected() int { return a.UnknownRule + a.WrongScope + a.BadEntry }

func (a *ApplyStats) add(b ApplyStats) {
	a.Merged += b.Merged
	a.Unchanged += b.Unchanged
	a.Stale += b.Stale
	a.Ahead += b.Ahead
	a.Full += b.Full
	a.UnknownRule += b.UnknownRule
	a.WrongScope += b.WrongScope
	a.BadEntry += b.BadEntry
	a.Echo += b.Echo
}

// Node is one geolimit node's core. All methods are safe for concurrent use;
// Decide scales across cores (the store is sharded).
type Node struct {
	self    crdt.Replica
	store   *crdt.Store
	maxSkew int64
	rules   atomic.Pointer[ruleSet]

	// applyMu keeps Apply (read side) and forgetting unused replicas in Tick
	// (write side) apart, so an ID is never forgotten between Intern and Merge.
	applyMu    sync.RWMutex
	lastForget atomic.Int64 // when Tick last forgot unused replicas

	mu     sync.Mutex // serialises SetRules and guards freeIDs, nextID, applied
	freeID []crdt.RuleID
	nextID crdt.RuleID
	stats  ApplyStats

	shareFloor, shareStep float64
	healHold              int64
	partMu                sync.Mutex // serialises SetUnheard
	part                  atomic.Pointer[partition]
}

type ruleSet struct {
	small  []*ruleState // all rules when there are few: a scan beats hashing
	byName map[string]*ruleState
	byID   map[crdt.RuleID]*ruleState
	sorted []*ruleState // by name
}

type ruleState struct {
	Rule
	id    crdt.RuleID
	width int64
	cur   atomic.Pointer[winCache]
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
		store:      crdt.NewStore(crdt.StoreConfig{Self: cfg.Self, MaxKeys: cfg.MaxKeys, Shards: cfg.Shards}),
		maxSkew:    int64(cfg.MaxSkew),
	}
	n.rules.Store(&ruleSet{byName: map[string]*ruleState{}, byID: map[crdt.RuleID]*ruleState{}})
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

// Self returns the node's replica identity.
func (n *Node) Self() crdt.Replica { return n.self }

// SetRules replaces the rule set. Rules whose name and window are unchanged
// keep their counts (limit, cost, scope, mode and policy may change); others
// start empty, and removed rules' counts are dropped. An invalid set changes
// nothing.
func (n *Node) SetRules(rules []Rule) error {
	if err := ValidateRules(rules); err != nil {
		return fmt.Errorf("pop: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.rules.Load()
	next := &ruleSet{byName: map[string]*ruleState{}, byID: map[crdt.RuleID]*ruleState{}}
	kept := map[crdt.RuleID]bool{}
	for _, r := range rules {
		rs := &ruleState{Rule: r, width: int64(r.Window)}
		if o, ok := old.byName[r.Name]; ok && o.Window == r.Window {
			rs.id = o.id
			kept[o.id] = true
		} else {
			id, err := n.allocID()
			if err != nil {
				return err
			}
			rs.id = id
		}
		next.byName[r.Name] = rs
		next.byID[rs.id] = rs
		next.sorted = append(next.sorted, rs)
		n.store.SetProtect(rs.id, protectThreshold(r.Limit))
	}
	sort.Slice(next.sorted, func(i, j int) bool { return next.sorted[i].Name < next.sorted[j].Name })
	if len(next.sorted) <= smallRuleSet {
		next.small = next.sorted
	}
	n.rules.Store(next)
	for id := range old.byID {
		if !kept[id] {
			n.store.DropRule(id)
			n.freeID = append(n.freeID, id)
		}
	}
	n.resnapshot()
	return nil
}

// protectThreshold is the count at or above which a key is never evicted: a
// tenth of the limit, and at least 2 so that keys seen once can make room.
func protectThreshold(limit uint64) uint64 { return max(1, limit/10) + 1 }

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

func (n *Node) decide(now int64, rule, key string, cost uint64, count bool) (Decision, error) {
	r, ok := n.rules.Load().get(rule)
	switch {
	case !ok:
		return Decision{}, ErrUnknownRule
	case len(key) == 0:
		return Decision{}, ErrEmptyKey
	case len(key) > crdt.MaxKeyLen:
		return Decision{}, ErrKeyTooLong
	case cost < 1:
		return Decision{}, ErrBadCost
	case cost > r.Limit:
		return Decision{}, ErrCostOverLimit
	}
	idx, el := r.split(now)
	limit := r.Limit
	var sh *share
	if r.OnPartition == Share && r.Scope == ScopeGlobal && n.part.Load() != nil {
		var lim float64
		if lim, sh, ok = n.shareLimit(r, key, now, idx, el); ok {
			limit = uint64(min(lim, float64(r.Limit)))
		}
	}
	var res crdt.AdmitResult
	if cost > limit {
		// The share left to this side cannot hold the request; retry once the
		// partition is over, or a window later at the earliest.
		res = crdt.AdmitResult{Result: window.Result{Remaining: limit, RetryAfter: r.width, Reset: r.width}}
	} else {
		res = n.store.Admit(r.id, key, crdt.Now{Index: idx, Elapsed: el, Width: r.width}, limit, cost, count)
	}
	if sh != nil && count {
		sh.record(idx, cost, !res.Allowed)
	}
	d := Decision{
		Allowed:    res.Allowed,
		Untracked:  res.Untracked,
		Limit:      r.Limit,
		Remaining:  min(res.Remaining, limit),
		Reset:      time.Duration(res.Reset),
		RetryAfter: time.Duration(res.RetryAfter),
	}
	if !d.Allowed && r.Mode == Shadow {
		d.Allowed, d.ShadowDenied = true, true
	}
	return d, nil
}

// Apply merges a delta received from another replica through a transport of
// the given scope: ScopePoP for the PoP's own members (pop and global rules),
// ScopeGlobal for other PoPs (global rules only). Bad entries are skipped and
// counted; the rest still merge.
func (n *Node) Apply(now int64, d *crdt.Delta, via Scope) ApplyStats {
	var st ApplyStats
	defer func() {
		n.mu.Lock()
		n.stats.add(st)
		n.mu.Unlock()
	}()
	if d.Sender == n.self {
		st.Echo = len(d.Entries)
		return st
	}
	if d.Sender.Validate() != nil || (via == ScopePoP && !d.Sender.SamePoP(n.self)) {
		st.WrongScope = len(d.Entries)
		return st
	}
	n.applyMu.RLock()
	defer n.applyMu.RUnlock()
	rep, ok := n.store.Intern(d.Sender)
	if !ok {
		st.Full = len(d.Entries)
		return st
	}
	rs := n.rules.Load()
	for i := range d.Entries {
		e := &d.Entries[i]
		r, ok := rs.byName[e.Rule]
		if !ok {
			st.UnknownRule++
			continue
		}
		if r.Scope == ScopeNode || (r.Scope == ScopePoP && via != ScopePoP) {
			st.WrongScope++
			continue
		}
		if len(e.Key) == 0 || len(e.Key) > crdt.MaxKeyLen {
			st.BadEntry++
			continue
		}
		idx, _ := window.Split(now, r.width)
		if limitIdx, _ := window.Split(now+n.maxSkew, r.width); e.Window > limitIdx {
			st.Ahead++
			continue
		}
		switch n.store.Merge(r.id, e.Key, idx, e.Window, rep, e.Count) {
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
	return st
}

// Flush returns the own counts that changed since the last Flush, as at most
// one ScopePoP and one ScopeGlobal delta stamped with now. Node-scope rules
// produce nothing.
func (n *Node) Flush(now int64) []Outbound {
	rs := n.rules.Load()
	var popD, globD crdt.Delta
	n.store.Flush(func(e crdt.FlushEntry) { n.route(rs, e, &popD, &globD) })
	return n.outbound(now, &popD, &globD)
}

// Pending returns about how many keys changed since the last Flush, so that
// a caller can flush early when a batch reaches its size cap.
func (n *Node) Pending() int { return n.store.Pending() }

// AntiEntropy returns every own count of the live windows, split like Flush:
// sent periodically and on join or reconnect, it repairs lost final deltas and
// teaches new or restarted peers.
func (n *Node) AntiEntropy(now int64) []Outbound {
	rs := n.rules.Load()
	var popD, globD crdt.Delta
	n.store.Own(n.indexFunc(rs, now), func(e crdt.FlushEntry) { n.route(rs, e, &popD, &globD) })
	return n.outbound(now, &popD, &globD)
}

// State returns every count this node holds in the live windows of pop and
// global rules, own and remote, one delta per owning replica (sorted by
// replica): the push/pull state a joining or restarted member of the PoP
// merges to learn the live windows at once.
func (n *Node) State(now int64) []crdt.Delta {
	rs := n.rules.Load()
	byRep := map[crdt.ReplicaID]*crdt.Delta{}
	n.store.Entries(n.indexFunc(rs, now), func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.Scope == ScopeNode {
			return
		}
		d := byRep[rep]
		if d == nil {
			d = &crdt.Delta{SentAt: now}
			byRep[rep] = d
		}
		d.Entries = append(d.Entries, crdt.Entry{Rule: r.Name, Key: e.Key, Window: e.Window, Count: e.Count})
	})
	out := make([]crdt.Delta, 0, len(byRep))
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

func (n *Node) route(rs *ruleSet, e crdt.FlushEntry, popD, globD *crdt.Delta) {
	r := rs.byID[e.Rule]
	if r == nil {
		return
	}
	ent := crdt.Entry{Rule: r.Name, Key: e.Key, Window: e.Window, Count: e.Count}
	switch r.Scope {
	case ScopePoP:
		popD.Entries = append(popD.Entries, ent)
	case ScopeGlobal:
		globD.Entries = append(globD.Entries, ent)
	}
}

func (n *Node) outbound(now int64, popD, globD *crdt.Delta) []Outbound {
	var out []Outbound
	for _, o := range []struct {
		s Scope
		d *crdt.Delta
	}{{ScopePoP, popD}, {ScopeGlobal, globD}} {
		if len(o.d.Entries) == 0 {
			continue
		}
		o.d.Sender, o.d.SentAt = n.self, now
		out = append(out, Outbound{Scope: o.s, Delta: *o.d})
	}
	return out
}

// Tick does periodic housekeeping at now: it drops keys whose windows have
// all passed and, once many replica identities have piled up, the ones no
// live key references. Call it every second or so.
func (n *Node) Tick(now int64) {
	n.store.Sweep(n.indexFunc(n.rules.Load(), now))
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
	idx, el := window.Split(now, r.width)
	v := KeyView{Rule: rule, Key: key, Limit: r.Limit, Windows: []crdt.WindowView{}}
	if ws, ok := n.store.View(r.id, key, idx); ok {
		v.Windows = ws
	}
	var prev, curr uint64
	for _, w := range v.Windows {
		switch w.Index {
		case idx - 1:
			prev = w.Total
		case idx:
			curr = w.Total
		}
	}
	v.Estimate = window.Estimate(prev, curr, el, r.width)
	return v, nil
}

// Stats are a Node's cumulative counters.
type Stats struct {
	Store crdt.StoreStats
	// Applied sums the ApplyStats of every Apply so far.
	Applied ApplyStats
	// KeysByRule is the number of live keys per rule name.
	KeysByRule map[string]int
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	rs := n.rules.Load()
	st := Stats{Store: n.store.Stats(), KeysByRule: map[string]int{}}
	for _, r := range rs.sorted {
		st.KeysByRule[r.Name] = 0
	}
	for id, c := range n.store.KeysByRule() {
		if r := rs.byID[id]; r != nil {
			st.KeysByRule[r.Name] = c
		}
	}
	n.mu.Lock()
	st.Applied = n.stats
	n.mu.Unlock()
	return st
}
