package pop

import (
	"cmp"
	"slices"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/inflight"
	"github.com/geolimit/geolimit/wire"
)

// Replicating in-flight counts inside the PoP (see concurrency.go and
// crdt/inflight.go). A node sends its own count of a pop-scope
// concurrency rule's key to the members (Batch.Local) at the Flush after
// it changed, and every own count that is not zero again at least every
// quarter of the shortest lease TTL (and with every anti-entropy round),
// so that a member's count of a live holder never lapses. Each value
// carries a version, drawn at sending from one counter of the node, so
// the newer of two values of one sender wins at the receiver.

// flushInflight adds to b.Local (when local) the own counts that changed
// since the last flush, and every own count when a refresh is due; the
// change marks are cleared either way.
func (inflightPart) flush(n *Node, rs *ruleSet, now int64, b *Batch, local, _ bool) {
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	refresh := false
	if ttl := minLeaseTTL(rs); ttl > 0 && now-s.refreshed >= ttl/4 {
		refresh = true
	}
	if len(s.dirty) == 0 && !refresh {
		return
	}
	if local {
		out := inflight.Section.Items(&b.Local)
		for k := range s.dirty {
			if e := s.keys[k]; e == nil || !refresh || e.own == 0 {
				out = s.appendOwn(out, rs, k, e)
			}
		}
		if refresh {
			out = s.appendAll(out, rs)
		}
		inflight.Section.Set(&b.Local, out)
	}
	if refresh {
		s.refreshed = now
	}
	clear(s.dirty)
}

// appendOwn appends k's own count (0 when e is nil) with a new version,
// when k's rule is a pop-scope concurrency rule. Requires s.mu held.
func (s *slotTable) appendOwn(out []inflight.Count, rs *ruleSet, k slotKey, e *slotEntry) []inflight.Count {
	r := rs.byID[k.rule]
	if r == nil || r.Kind != Concurrency || r.Scope != ScopePoP {
		return out
	}
	var c uint64
	if e != nil {
		c = e.own
	}
	s.ver++
	return append(out, inflight.Count{Rule: r.Name, Key: k.key, Count: c, Version: s.ver})
}

// appendAll appends every own count that is not zero, sorted by rule and
// key (the simulator's output must not depend on map order). Requires
// s.mu held.
func (s *slotTable) appendAll(out []inflight.Count, rs *ruleSet) []inflight.Count {
	from := len(out)
	for k, e := range s.keys {
		if e.own > 0 {
			out = s.appendOwn(out, rs, k, e)
		}
	}
	added := out[from:]
	slices.SortFunc(added, func(a, b inflight.Count) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key)) })
	for i := range added { // versions in the sorted order, still all new
		added[i].Version = s.ver - uint64(len(added)-1-i)
	}
	return out
}

// antiEntropyInflight returns every own count that is not zero (an
// anti-entropy round's part 0).
func (n *Node) antiEntropyInflight(rs *ruleSet, now int64) []inflight.Count {
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.appendAll(nil, rs)
	if len(out) > 0 {
		s.refreshed = now
	}
	return out
}

// minLeaseTTL is the shortest lease TTL of the pop-scope concurrency
// rules; 0 when there are none.
func minLeaseTTL(rs *ruleSet) int64 {
	var m int64
	for _, r := range rs.sorted {
		if r.Kind == Concurrency && r.Scope == ScopePoP && (m == 0 || r.leaseTTL() < m) {
			m = r.leaseTTL()
		}
	}
	return m
}

// applyInflight merges d's in-flight counts (received via scope via from
// a member accepted by Apply) into the members' counts. Only the own PoP's
// members send them, of pop-scope concurrency rules.
func (inflightPart) apply(n *Node, now int64, d *wire.Delta, _ Scope, st *ApplyStats) {
	fs := inflight.Section.Items(d)
	rs := n.rules.Load()
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range fs {
		f := &fs[i]
		r, ok := rs.get(f.Rule)
		switch {
		case !ok:
			st.UnknownRule++
			continue
		case r.Kind != Concurrency || r.Scope != ScopePoP:
			st.WrongScope++
			continue
		case len(f.Key) == 0 || len(f.Key) > crdt.MaxKeyLen:
			st.BadEntry++
			continue
		}
		c := f.Count
		if c > r.Limit {
			c = r.Limit
			st.Inflight.Clamped++
		}
		k := slotKey{r.id, f.Key}
		e := s.entry(k, false)
		at := -1
		if e != nil {
			for j := range e.peers {
				if e.peers[j].from == d.Sender {
					at = j
					break
				}
			}
		}
		switch {
		case at >= 0 && e.peers[at].ver >= f.Version:
			st.Inflight.Unchanged++
		case at >= 0:
			// A zero stays as the sender's newest version until it lapses,
			// so that an older count arriving late changes nothing.
			e.peers[at] = peerCount{from: d.Sender, count: c, ver: f.Version, until: now + r.leaseTTL()}
			st.Inflight.Merged++
		case s.peers >= s.maxLeases:
			st.Inflight.Refused++
		default:
			if e == nil {
				e = s.entry(k, true)
			}
			e.peers = append(e.peers, peerCount{from: d.Sender, count: c, ver: f.Version, until: now + r.leaseTTL()})
			s.peers++
			st.Inflight.Merged++
		}
	}
}

// KeepMembers drops the in-flight counts of the own PoP's nodes for which
// member returns false: nodes that left the PoP's membership (a node that
// died holding slots gives them back here, or at the latest when its
// counts lapse, LeaseTTL after it was last heard). The replication layer
// calls it when the membership changes.
func (l Link) KeepMembers(member func(identity.Replica) bool) {
	n := l.n
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.keys {
		for i := 0; i < len(e.peers); {
			if !member(e.peers[i].from) {
				e.peers[i] = e.peers[len(e.peers)-1]
				e.peers = e.peers[:len(e.peers)-1]
				s.peers--
				continue
			}
			i++
		}
		s.tidy(e)
	}
}

// inflightPart is the concurrency rules' in-flight counts as the node
// composes them (components.go). A joining member learns them from the
// members' next flush, not from the state exchange: a count only its
// owner may send.
type inflightPart struct{}

func (inflightPart) section() sectionLen { return inflight.Section }

// from: only the own PoP's members send their in-flight counts; via
// ScopeGlobal they are refused.
func (inflightPart) from(via Scope) bool { return via == ScopePoP }

func (inflightPart) antiEntropy(n *Node, rs *ruleSet, now int64, b *Batch, _ func(string) bool) {
	inflight.Section.Set(&b.Local, n.antiEntropyInflight(rs, now))
}

func (inflightPart) state(*Node, *ruleSet, int64, *wire.Delta) {}

func (inflightPart) sweep(n *Node, now int64) { n.slots.sweep(now) }
