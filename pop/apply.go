// Merging what other replicas send: Apply.

package pop

import (
	"strings"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// Apply merges a delta received from another replica through a transport of
// the given scope. Via ScopePoP come the own PoP's members (another node of
// the own PoP, any incarnation, never an aggregate), with pop- and
// global-scope rules. Via ScopeGlobal come the other PoPs' aggregates (a
// sender whose Node is identity.PoPNode), with global-scope rules only; a node
// sender there is refused, for a PoP speaks to others only through its
// aggregate. The own PoP's aggregate of the current epoch is an echo of what
// the members already hold per node and is ignored; of another epoch (a
// former one, relayed back after the whole PoP restarted) it merges like a
// foreign PoP's count. Senders that may not use the transport are refused
// whole (WrongScope); bad entries are skipped and counted, the rest still
// merge.
func (l Link) Apply(now int64, d *wire.Delta, via Scope) ApplyStats {
	n := l.n
	return n.Link().ApplyFrom(now, d, via, nil)
}

// ApplyFrom is Apply with from, when not nil, caching the store's ID of the
// sender: a caller that keeps one per remote PoP saves a look-up per
// message. Calls that share a cache must not run concurrently.
func (l Link) ApplyFrom(now int64, d *wire.Delta, via Scope, from *crdt.InternCache) ApplyStats {
	n := l.n
	var st ApplyStats
	defer func() {
		n.mu.Lock()
		n.stats.Add(st)
		n.mu.Unlock()
	}()
	if d.Sender == n.self {
		st.Echo = partItems(d)
		return st
	}
	if !senderFits(n.self, d.Sender, via) {
		st.WrongScope = partItems(d)
		return st
	}
	// The epoch is read under applyMu, so an entry of the aggregate SetEpoch
	// drops is either refused here or merged before SetEpoch drops it.
	n.applyMu.RLock()
	defer n.applyMu.RUnlock()
	if via == ScopeGlobal && d.Sender.SamePoP(n.self) && n.ownEpoch(d.Sender.Incarnation) {
		st.Echo = partItems(d)
		return st
	}
	for _, p := range features {
		switch k := p.section().Len(d); {
		case k == 0:
		case !p.from(via):
			st.WrongScope += k
		default:
			p.apply(n, now, d, via, &st)
		}
	}
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
	mark := n.regionMarks(d.Sender, via) // region.go
	// Entries come grouped by rule: a rule and its windows are looked up
	// once per run of its entries. In a large store nearly every entry's
	// shard, slot and list of remote counts are cache misses; they are
	// taken together, a block of entries at a time: every key is hashed
	// and its shard prefetched, then its slot, then the line of its list
	// a merge reads first (in a store that knows many replicas), then the
	// entries merge.
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
		if r.Scope == ScopeNode || (r.Scope == ScopePoP && via != ScopePoP) || r.Kind == Concurrency {
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
		for k := range run {
			if len(run[k].Key) <= crdt.MaxKeyLen {
				n.store.PrefetchSide(hs[k], r.id, run[k].Key, rep)
			}
		}
		idx := r.index(now)
		limitIdx := r.index(now + n.aheadOf(via))
		for k := range run {
			merged := st.Merged
			n.mergeAt(now, idx, limitIdx, r, rep, &run[k], hs[k], &st)
			if mark && st.Merged > merged && r.Scope == ScopeGlobal {
				n.markRegion(r.id, strings.Clone(run[k].Key), run[k].Window)
			}
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
func (l Link) PrefetchDelta(d *wire.Delta) {
	n := l.n
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
	idx := r.index(now)
	limitIdx := r.index(now + n.maxSkew)
	n.mergeAt(now, idx, limitIdx, r, rep, e, n.store.Hash(r.id, e.Key), st)
}

// mergeAt is mergeEntry with r's current window index and the last index a
// peer may be ahead at (now + max skew) already computed, for a run of
// entries of one rule, and h the store's Hash of the entry's key.
func (n *Node) mergeAt(now, idx, limitIdx int64, r *ruleState, rep crdt.ReplicaID, e *crdt.Entry, h uint64, st *ApplyStats) {
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
	var o crdt.MergeOutcome
	if r.pacer != nil {
		o = n.mergePaced(now, idx, r, rep, e, h, count) // gcra_shared.go
	} else {
		o = n.store.MergeHashed(h, r.id, e.Key, idx, e.Window, rep, count)
	}
	switch o {
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
func senderFits(self, sender identity.Replica, via Scope) bool {
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
