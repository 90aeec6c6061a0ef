package pop

import (
	"sort"

	"github.com/geolimit/geolimit/crdt"
)

// Snapshot returns what a restarted incarnation of this node needs to go on
// where this one stopped (see Restore), one delta per owning replica, sorted
// by replica, without empty ones:
//
//   - node- and pop-scope rules: the per-node counts of the live windows,
//     own (node scope: only own) and the PoP's members' (pop scope);
//   - global rules: PoP aggregates only: the own PoP's totals under the
//     current epoch (while it is 0, under the node's incarnation), and every
//     aggregate held (other PoPs', the own PoP's former epochs).
//
// Global counts are kept as aggregates, never per node: a restarted PoP
// publishes under a new epoch, and its former totals must stay counted once,
// under the former epoch, by every PoP.
func (n *Node) Snapshot(now int64) []crdt.Delta {
	rs := n.rules.Load()
	ep := n.Epoch()
	idx := n.indexFunc(rs, now)
	byRep := map[crdt.ReplicaID]*crdt.Delta{}
	aggregate := map[crdt.ReplicaID]bool{} // whether a replica is a PoP's
	add := func(rep crdt.ReplicaID, e crdt.Entry) {
		d := byRep[rep]
		if d == nil {
			d = &crdt.Delta{SentAt: now, Epoch: ep}
			byRep[rep] = d
		}
		d.Entries = append(d.Entries, e)
	}
	n.store.Entries(idx, func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || e.Count == 0 {
			return
		}
		isPoP, ok := aggregate[rep]
		if !ok {
			isPoP = n.store.Replica(rep).IsPoP()
			aggregate[rep] = isPoP
		}
		switch {
		case r.Scope == ScopeNode && rep != crdt.SelfID,
			r.Scope == ScopeGlobal && !isPoP,
			r.Scope != ScopeGlobal && isPoP:
			return
		}
		add(rep, crdt.Entry{Rule: r.Name, Key: e.Key, Window: e.Window, Count: e.Count})
	})
	out := make([]crdt.Delta, 0, len(byRep)+1)
	for rep, d := range byRep {
		d.Sender = n.store.Replica(rep)
		out = append(out, *d)
	}
	{
		// A node with no epoch (no replication, or a member that has not
		// learned its PoP's) keeps its PoP's totals as the aggregate of an
		// epoch of its own incarnation, as a node alone in its PoP does.
		aggEpoch := ep
		if aggEpoch == 0 {
			aggEpoch = n.self.Incarnation
		}
		own := crdt.Delta{Sender: crdt.PoPReplica(n.self.Region, n.self.PoP, aggEpoch), SentAt: now, Epoch: ep}
		n.store.Totals(idx, func(e crdt.FlushEntry) {
			if r := rs.byID[e.Rule]; r != nil && r.Scope == ScopeGlobal && e.PoP > 0 {
				own.Entries = append(own.Entries, crdt.Entry{Rule: r.Name, Key: e.Key, Window: e.Window, Count: e.PoP})
			}
		})
		if len(own.Entries) > 0 {
			out = append(out, own)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sender.String() < out[j].Sender.String() })
	return out
}

// Restore merges a former incarnation's Snapshot into the node, before it
// decides: a replica's counts merge by per-replica maximum as any remote
// replica's do, so restoring twice, or a snapshot older than what peers
// relay, changes nothing wrongly. Aggregates merge as through ScopeGlobal
// (the own PoP's former epochs like another PoP's); per-node counts of the
// own PoP merge as through ScopePoP, and node-scope counts only when they
// are a former incarnation's of this very node. Windows that passed are
// dropped (Stale); entries the snapshot could not hold (global per-node
// counts, another PoP's nodes, this incarnation) are refused (WrongScope,
// Echo), counted like Apply's.
func (n *Node) Restore(now int64, ds []crdt.Delta) ApplyStats {
	var st ApplyStats
	for i := range ds {
		d := &ds[i]
		if d.Sender.IsPoP() {
			st.Add(n.Apply(now, d, ScopeGlobal))
			continue
		}
		st.Add(n.restoreNode(now, d))
	}
	return st
}

// restoreNode merges the per-node counts of d (see Restore).
func (n *Node) restoreNode(now int64, d *crdt.Delta) ApplyStats {
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
		r, ok := rs.byName[e.Rule]
		switch {
		case !ok:
			st.UnknownRule++
		case r.Scope == ScopeGlobal, r.Scope == ScopeNode && !former:
			st.WrongScope++
		default:
			n.mergeEntry(now, r, rep, e, &st)
		}
	}
	return st
}
