// What a node sends: Flush, AntiEntropy and State.

package pop

import (
	"sort"
	"sync"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// Flush returns what changed since the last Flush, stamped with now: in
// Local the own counts that changed, in PoP the PoP totals that changed of
// the keys owns accepts (nil: every key). A PoP total changes with an own
// count and when a member's count arrives, so PoP may hold a key this node
// did not count. The change marks are cleared whether or not a PoP total was
// published (epoch 0, a key owned by another member): the member that owns a
// key publishes it, and AntiEntropy repairs a change of ownership. owns is
// called without any lock of the node held. Node-scope rules produce nothing.
// With sparse updates on (SetSparse), PoP leaves out the totals of keys far
// below their limits that moved by less than a step since they were last
// published (sparse.go).
func (l Link) Flush(now int64, owns func(key string) bool) Batch {
	n := l.n
	return n.Link().FlushTo(now, owns, true)
}

// FlushTo is Flush for a node that may have no member to tell: with local
// false, Batch.Local is left empty (its change marks are cleared all the
// same), which spares a node alone in its PoP building it.
func (l Link) FlushTo(now int64, owns func(key string) bool, local bool) Batch {
	n := l.n
	rs := n.rules.Load()
	b := n.batch(now)
	pub := b.PoP.Epoch != 0
	sp := n.beginSparse(rs, now, b.PoP.Epoch) // sparse.go
	defer sp.end()
	voice := n.region.on.Load() // region.go
	n.flushAsked(rs, now)       // asked.go
	n.store.FlushAt(now, n.flushHorizon(), func(e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.Scope == ScopeNode {
			return
		}
		if voice && r.Scope == ScopeGlobal && e.Changed&crdt.PoPChanged != 0 && e.PoP > 0 {
			n.markRegion(r.id, e.Key, e.Window)
		}
		if local && e.Changed&crdt.OwnChanged != 0 && e.Count > 0 {
			b.Local.Entries = append(b.Local.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
		}
		if pub && r.Scope == ScopeGlobal && e.Changed&crdt.PoPChanged != 0 && e.PoP > 0 && (owns == nil || owns(e.Key)) && sp.publish(n, r, &e) {
			b.PoP.Entries = append(b.PoP.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.PoP})
		}
	})
	for _, p := range features {
		p.flush(n, rs, now, &b, local, pub)
	}
	return b
}

// batch returns an empty Batch stamped with now and the current epoch.
func (n *Node) batch(now int64) Batch {
	ep := n.Link().Epoch()
	return Batch{
		Local: wire.Delta{Sender: n.self, SentAt: now, Epoch: ep},
		PoP:   wire.Delta{Sender: identity.PoPReplica(n.self.PoPID, ep), SentAt: now, Epoch: ep},
	}
}

// Pending returns about how many keys changed since the last Flush, so that
// a caller can flush early when a batch reaches its size cap.
func (l Link) Pending() int { return l.n.store.Pending() }

// AntiEntropy returns every own count of the live windows (Local) and every
// PoP total of the live windows of the keys owns accepts (PoP; nil owns
// every key), split like Flush: sent periodically and on join or reconnect,
// it repairs lost final deltas, teaches new or restarted peers and
// republishes the keys whose ownership moved. owns is called without any lock
// of the node held.
func (l Link) AntiEntropy(now int64, owns func(key string) bool) Batch {
	n := l.n
	return n.Link().AntiEntropyPart(now, owns, 0, 1, false)
}

// antiEntropyPartKeys is about how many keys one part of a paced
// anti-entropy round walks (AntiEntropyParts).
const antiEntropyPartKeys = 4096

// AntiEntropyParts returns in how many parts a paced anti-entropy round of
// the store's current size is best cut: parts of about 4096 keys, so that
// one part walks, encodes and sends in a few milliseconds; 1 for a small
// store.
func (l Link) AntiEntropyParts() int { return l.n.store.Parts(antiEntropyPartKeys) }

// AntiEntropyPart is AntiEntropy over part of parts (0 <= part < parts):
// the parts 0 to parts-1 of one parts send every count AntiEntropy sends,
// each key's in exactly one part, and the penalty blocks and remembered
// decisions with part 0. A
// caller spreads the parts over its interval so that a large store's round
// is not one burst of work that stalls the decisions sharing its cores.
//
// With changed, a periodic round's part: only the counts and totals of the
// keys whose PoP total settled since the rounds before (crdt.Store's
// TotalsPart); without, every one (a sync's answer, a new epoch).
func (l Link) AntiEntropyPart(now int64, owns func(key string) bool, part, parts int, changed bool) Batch {
	n := l.n
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
	n.store.OwnPart(idx, part, parts, changed, func(e crdt.FlushEntry) {
		if r := rs.byID[e.Rule]; r != nil && r.Scope != ScopeNode && e.Count > 0 {
			buf = append(buf, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
		}
	})
	b.Local.Entries, buf = exactCopy(buf), buf[:0]
	if part == 0 {
		for _, p := range features {
			p.antiEntropy(n, rs, now, &b, owns)
		}
	}
	if b.PoP.Epoch != 0 || changed {
		// Without an epoch no total is sent, but the walk of the totals
		// starts the keys' next period, which the own counts' walk reads.
		n.store.TotalsPart(idx, part, parts, changed, func(e crdt.FlushEntry) {
			if r := rs.byID[e.Rule]; b.PoP.Epoch != 0 && r != nil && r.Scope == ScopeGlobal && e.PoP > 0 && (owns == nil || owns(e.Key)) {
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
func (l Link) State(now int64) []wire.Delta {
	n := l.n
	rs := n.rules.Load()
	ep := n.Link().Epoch()
	byRep := map[crdt.ReplicaID]*wire.Delta{}
	n.store.Entries(n.indexFunc(rs, now), func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.Scope == ScopeNode {
			return
		}
		d := byRep[rep]
		if d == nil {
			d = &wire.Delta{SentAt: now, Epoch: ep}
			byRep[rep] = d
		}
		d.Entries = append(d.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
	})
	out := make([]wire.Delta, 0, len(byRep)+1)
	var own wire.Delta
	for _, p := range features {
		p.state(n, rs, now, &own)
	}
	if own.Sections() > 0 {
		// What the parts hold has no owner among the counts' replicas: it
		// travels with this node's own counts.
		self := own
		self.Sender, self.SentAt, self.Epoch = n.self, now, ep
		for rep, d := range byRep {
			if n.store.Replica(rep) == n.self {
				self.Entries = d.Entries
				delete(byRep, rep)
			}
		}
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
		return r.index(now)
	}
}
