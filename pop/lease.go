package pop

import (
	"encoding/hex"
	"errors"
)

// LeaseID identifies a lease: 128 bits from a cryptographically secure
// generator (ChaCha8 seeded from crypto/rand), so that a lease cannot be
// guessed and given back by anyone but its holder.
type LeaseID [16]byte

// LeaseIDLen is the length of a lease ID's text form (String).
const LeaseIDLen = 2 * len(LeaseID{})

// String returns the ID's text form: 32 lower-case hex digits.
func (id LeaseID) String() string { return hex.EncodeToString(id[:]) }

// ErrBadLeaseID is a lease ID's text form that is not 32 hex digits.
var ErrBadLeaseID = errors.New("pop: lease: want 32 hex digits")

// ParseLeaseID parses a lease ID's text form (String).
func ParseLeaseID(s string) (LeaseID, error) {
	var id LeaseID
	if len(s) != LeaseIDLen {
		return id, ErrBadLeaseID
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, ErrBadLeaseID
	}
	return id, nil
}

// Lease is a concurrency check's held slots (Result.Lease); the zero value
// holds none. Give it back with Node.Release. A Lease is a plain value,
// safe for concurrent use; releasing it twice gives back nothing the
// second time.
type Lease struct{ l *lease }

// Held reports whether the check acquired a lease (it may have been given
// back since).
func (l Lease) Held() bool { return l.l != nil }

// ID returns the lease's ID; zero for the zero Lease.
func (l Lease) ID() LeaseID {
	if l.l == nil {
		return LeaseID{}
	}
	return l.l.id
}

// Until returns when the lease ends unless released (Unix nanoseconds); 0
// for a pinned lease or the zero Lease.
func (l Lease) Until() int64 {
	if l.l == nil {
		return 0
	}
	return l.l.until
}

// admitSlots is step 3 of decideRule for a concurrency rule: a request of
// cost slots fits when the slots in use (this node's leases and, for pop
// scope, the members' counts) plus cost are within the limit. With
// sl.take, one that fits acquires a lease (sl.lease; pinned with sl.pin);
// otherwise nothing is held and the answer is what taking would answer.
func (n *Node) admitSlots(d *Decision, now int64, r *ruleState, key string, cost uint64, sl *slotReq) {
	take := sl.take
	*d = Decision{Limit: r.Limit}
	s := n.slots
	s.mu.Lock()
	e := s.entry(slotKey{r.id, key}, false)
	var used uint64
	if e != nil {
		s.expire(e, now)
		used = e.used()
	}
	fits := cost <= r.Limit && used <= r.Limit-cost
	full := fits && take && len(s.leases) >= s.maxLeases
	switch {
	case fits && !full:
		d.Allowed = true
		d.Remaining = r.Limit - used - cost
		if take {
			if e == nil {
				e = s.entry(slotKey{r.id, key}, true)
			}
			e.share = r.Scope == ScopePoP
			l := &lease{e: e, slots: cost, idx: len(e.leases)}
			if !sl.pin {
				l.until = now + r.leaseTTL()
				if e.next == 0 || l.until < e.next {
					e.next = l.until
				}
			}
			for {
				s.rng.Read(l.id[:])
				if _, dup := s.leases[l.id]; !dup {
					break
				}
			}
			s.leases[l.id] = l
			e.leases = append(e.leases, l)
			e.own += cost
			s.byRule[r.id] += cost
			s.changed(e)
			s.st.Acquired++
			sl.lease = Lease{l}
		}
	default:
		d.Untracked = full
		d.Remaining = r.Limit - min(used, r.Limit)
		d.RetryAfter, d.Reset = ConcurrencyRetry, ConcurrencyRetry
		if take {
			s.st.Denied++
			if full {
				s.st.Full++
			}
		}
	}
	if e != nil && !take {
		s.tidy(e)
	}
	s.mu.Unlock()
}

// Release gives back the lease of ID id; false when no such lease is
// held (never acquired here, released, or expired at its TTL).
func (n *Node) Release(now int64, id LeaseID) bool {
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.leases[id]
	if l == nil {
		return false
	}
	return s.release(now, l)
}

// release gives back l unless it ended by now (then it is counted as
// expired, and false returned). Requires s.mu held.
func (s *slotTable) release(now int64, l *lease) bool {
	e := l.e
	if l.until != 0 && l.until <= now {
		s.expire(e, now)
		s.tidy(e)
		return false
	}
	s.drop(l)
	s.st.Released++
	s.tidy(e)
	return true
}

// inFlightByRule returns the slots this node's leases hold per
// concurrency rule of the current table (0 for one holding none).
func (n *Node) inFlightByRule() map[string]uint64 {
	rs := n.rules.Load()
	out := map[string]uint64{}
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs.sorted {
		if r.Kind == Concurrency {
			out[r.Name] = s.byRule[r.id]
		}
	}
	return out
}

// SlotStats returns the slot table's size and counters.
func (n *Node) SlotStats() SlotStats { return n.slots.stats() }

// InFlight returns the slots of key in use under the concurrency rule
// called rule at now: this node's leases and the members' counts.
func (n *Node) InFlight(now int64, rule, key string) (own, members uint64, ok bool) {
	r, found := n.rules.Load().get(rule)
	if !found || r.Kind != Concurrency {
		return 0, 0, false
	}
	s := n.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(slotKey{r.id, key}, false)
	if e == nil {
		return 0, 0, true
	}
	s.expire(e, now)
	own = e.own
	members = e.used() - own
	s.tidy(e)
	return own, members, true
}

// releaseDenied gives back the leases of a denied all-or-nothing request
// (acquired before a later check lost a race for the last units) and
// returns how many checks it uncounted.
func (n *Node) releaseDenied(now int64, res []Result) int {
	k := 0
	for i := range res {
		if r := &res[i]; r.Lease.l != nil {
			n.Release(now, r.Lease.ID())
			r.Lease, r.Counted = Lease{}, false
			k++
		}
	}
	return k
}
