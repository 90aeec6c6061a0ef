package pop

import (
	"iter"
	"sort"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// snapshotChunk is the most entries SnapshotEach holds for one replica
// before it hands them out.
const snapshotChunk = 1024

// SnapshotEach yields, in deltas of at most snapshotChunk entries (several
// per replica), what a restarted incarnation of this node needs to go on
// where this one stopped (see RestoreDelta):
//
//   - node- and pop-scope rules: the per-node counts of the live windows,
//     own (node scope: only own) and the PoP's members' (pop scope);
//   - the rules' modes set at run time (modes.go), in a delta of their
//     own, last;
//   - global rules: PoP aggregates only: the own PoP's totals under the
//     current epoch (while it is 0, under the node's incarnation), and every
//     aggregate held (other PoPs', the own PoP's former epochs).
//
// Global counts are kept as aggregates, never per node: a restarted PoP
// publishes under a new epoch, and its former totals must stay counted once,
// under the former epoch, by every PoP. Entries name their window as the
// wire does (Rule.WireName), so that each window of a rule of several is
// restored into its own.
//
// It streams, for a state file written as the store is walked: it holds at
// most snapshotChunk entries per replica, and no lock while it yields. A
// yielded delta is reused once yield returns.
func (n *Node) SnapshotEach(now int64) iter.Seq[*wire.Delta] {
	return func(yield func(*wire.Delta) bool) {
		rs := n.rules.Load()
		ep := n.Link().Epoch()
		idx := n.indexFunc(rs, now)
		type pending struct {
			d     wire.Delta
			isPoP bool // the replica is a PoP's aggregate
		}
		byRep := map[crdt.ReplicaID]*pending{}
		stopped := false
		emit := func(p *pending) {
			if !stopped && len(p.d.Entries) > 0 {
				stopped = !yield(&p.d)
				clear(p.d.Entries) // keep no keys alive
				p.d.Entries = p.d.Entries[:0]
			}
		}
		n.store.Entries(idx, func(rep crdt.ReplicaID, e crdt.FlushEntry) {
			r := rs.byID[e.Rule]
			if stopped || r == nil || e.Count == 0 || r.gcra {
				return // a GCRA rule's TATs are no counts: not kept (gcra.go)
			}
			p := byRep[rep]
			if p == nil {
				sender := n.store.Replica(rep)
				p = &pending{d: wire.Delta{Sender: sender, SentAt: now, Epoch: ep}, isPoP: sender.IsPoP()}
				byRep[rep] = p
			}
			switch {
			case r.Scope == ScopeNode && rep != crdt.SelfID,
				r.Scope == ScopeGlobal && !p.isPoP,
				r.Scope != ScopeGlobal && p.isPoP:
				return
			}
			p.d.Entries = append(p.d.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.Count})
			if len(p.d.Entries) >= snapshotChunk {
				emit(p)
			}
		})
		rest := make([]*pending, 0, len(byRep))
		for _, p := range byRep {
			rest = append(rest, p)
		}
		sort.Slice(rest, func(i, j int) bool { return rest[i].d.Sender.String() < rest[j].d.Sender.String() })
		for _, p := range rest {
			emit(p)
		}
		if stopped {
			return
		}
		// A node with no epoch (no replication, or a member that has not
		// learned its PoP's) keeps its PoP's totals as the aggregate of an
		// epoch of its own incarnation, as a node alone in its PoP does.
		aggEpoch := ep
		if aggEpoch == 0 {
			aggEpoch = n.self.Incarnation
		}
		own := &pending{d: wire.Delta{Sender: identity.PoPReplica(n.self.PoPID, aggEpoch), SentAt: now, Epoch: ep}}
		n.store.Totals(idx, func(e crdt.FlushEntry) {
			if r := rs.byID[e.Rule]; !stopped && r != nil && r.Scope == ScopeGlobal && e.PoP > 0 {
				own.d.Entries = append(own.d.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.PoP})
				if len(own.d.Entries) >= snapshotChunk {
					emit(own)
				}
			}
		})
		emit(own)
		if ms := n.Link().Modes(); !stopped && len(ms) > 0 {
			d := &wire.Delta{Sender: n.self, SentAt: now, Epoch: ep}
			modes.Section.Set(d, ms)
			yield(d)
		}
	}
}

// RestoreDelta merges one delta of a former incarnation's SnapshotEach into
// the node, before it decides: a replica's counts merge by per-replica
// maximum as any remote replica's do, so restoring twice, or a snapshot
// older than what peers relay, changes nothing wrongly. Aggregates merge as
// through ScopeGlobal (the own PoP's former epochs like another PoP's);
// per-node counts of the own PoP merge as through ScopePoP, and node-scope
// counts only when they are a former incarnation's of this very node.
// Rules' modes set at run time merge as MergeModes merges them.
// Windows that passed are dropped (Stale); entries the snapshot could not
// hold (global per-node counts, another PoP's nodes, this incarnation) are
// refused (WrongScope, Echo), counted like Apply's.
func (n *Node) RestoreDelta(now int64, d *wire.Delta) ApplyStats {
	n.Link().MergeModes(now, modes.Source{PoP: n.self.PoPID, Member: true}, modes.Section.Items(d)) // the node's own file
	if d.Sender.IsPoP() {
		return n.Link().Apply(now, d, ScopeGlobal)
	}
	return n.restoreNode(now, d)
}

// restoreNode merges the per-node counts of d (see Restore).
func (n *Node) restoreNode(now int64, d *wire.Delta) ApplyStats {
	var st ApplyStats
	defer func() {
		n.mu.Lock()
		n.stats.Add(st)
		n.mu.Unlock()
	}()
	switch {
	case d.Sender == n.self:
		st.Echo = len(d.Entries)
		return st
	case !senderFits(n.self, d.Sender, ScopePoP):
		st.WrongScope = len(d.Entries)
		return st
	}
	former := d.Sender.Node == n.self.Node
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
		r, ok := rs.getWire(e.Rule)
		if !ok {
			// Files of earlier versions name a rule of several windows
			// by its name; their entries are its first window's.
			r, ok = rs.get(e.Rule)
		}
		switch {
		case !ok:
			st.UnknownRule++
		case r.Scope == ScopeGlobal, r.Scope == ScopeNode && !former, r.gcra:
			st.WrongScope++
		default:
			n.mergeEntry(now, r, rep, e, &st)
		}
	}
	return st
}
