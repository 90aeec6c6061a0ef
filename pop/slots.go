package pop

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
)

// The slot table: the leases this node holds and the members' in-flight
// counts, per (concurrency rule, key). See concurrency.go.

// LeaseBytes and PeerCountBytes are about what a lease and a member's
// in-flight count take in memory beyond the key: the lease and its index
// entry; the count in its key's list.
const (
	LeaseBytes     = 160
	PeerCountBytes = 80
)

// slotKey is a (concurrency rule, key).
type slotKey struct {
	rule crdt.RuleID
	key  string
}

// slotEntry is a key's in-flight state on this node.
type slotEntry struct {
	k   slotKey
	own uint64 // slots held by this node's leases
	// leases are the key's leases; each knows its index.
	leases []*lease
	// next is the earliest end of a lease that expires; 0 when none does.
	next  int64
	peers []peerCount
	// share: the rule is of pop scope, its own count goes to the members.
	share bool
	// one backs leases while the key holds one lease (most keys): no
	// allocation of its own.
	one [1]*lease
}

// peerCount is a member's in-flight count of a key.
type peerCount struct {
	from  identity.Replica
	count uint64
	ver   uint64
	until int64 // when it stops counting unless heard again
}

// lease is a held lease.
type lease struct {
	id    LeaseID
	e     *slotEntry
	slots uint64
	until int64 // 0: pinned, never expires
	idx   int   // index in e.leases; -1 once given back
}

// slotTable is the node's concurrency state. Safe for concurrent use.
type slotTable struct {
	mu     sync.Mutex
	keys   map[slotKey]*slotEntry
	leases map[LeaseID]*lease
	// maxLeases caps the leases held, and as many members' counts.
	maxLeases int
	peers     int // members' counts held
	// dirty are the keys whose own count changed since the last flush, of
	// pop-scope rules (bounded by maxLeases: beyond, members learn of the
	// change at the next refresh).
	dirty map[slotKey]struct{}
	// ver is the last version given to an own count sent.
	ver uint64
	// refreshed is when every own count was last sent.
	refreshed int64
	rng       *rand.ChaCha8
	st        SlotStats
	// byRule is the slots this node's leases hold, per rule.
	byRule map[crdt.RuleID]uint64
}

// SlotStats are the slot table's size and counters.
type SlotStats struct {
	// Leases held now, MaxLeases their cap, PeerCounts the members'
	// in-flight counts held (capped at MaxLeases too), Keys the keys with
	// either.
	Leases, MaxLeases, PeerCounts, Keys int
	// Acquired, Denied, Released and Expired count leases taken, checks
	// denied for want of a slot (or of room for a lease: Full too), leases
	// given back by Release and leases given back at their TTL.
	Acquired, Denied, Released, Expired, Full uint64
}

func newSlotTable(maxLeases int, seed uint64) *slotTable {
	var s [32]byte
	if seed != 0 {
		binary.LittleEndian.PutUint64(s[:], seed)
		s[8] = 'L'
	} else if _, err := crand.Read(s[:]); err != nil {
		panic("pop: no randomness for lease ids: " + err.Error()) // crypto/rand never fails on supported systems
	}
	return &slotTable{keys: map[slotKey]*slotEntry{}, leases: map[LeaseID]*lease{}, dirty: map[slotKey]struct{}{}, byRule: map[crdt.RuleID]uint64{},
		maxLeases: maxLeases, rng: rand.NewChaCha8(s)}
}

// expire gives back e's leases that ended by now and drops the members'
// counts not heard since their until. Requires s.mu held.
func (s *slotTable) expire(e *slotEntry, now int64) {
	if e.next != 0 && now >= e.next {
		e.next = 0
		for i := 0; i < len(e.leases); {
			l := e.leases[i]
			if l.until != 0 && l.until <= now {
				s.st.Expired++
				s.drop(l) // moves the last lease to i
				continue
			}
			if l.until != 0 && (e.next == 0 || l.until < e.next) {
				e.next = l.until
			}
			i++
		}
	}
	for i := 0; i < len(e.peers); {
		if e.peers[i].until <= now {
			e.peers[i] = e.peers[len(e.peers)-1]
			e.peers = e.peers[:len(e.peers)-1]
			s.peers--
			continue
		}
		i++
	}
}

// used is the slots of e in use: own and the members'. Requires s.mu held.
func (e *slotEntry) used() uint64 {
	u := e.own
	for i := range e.peers {
		u += e.peers[i].count
	}
	return u
}

// drop removes lease l from its key and the index and marks the key's
// count changed. Requires s.mu held.
func (s *slotTable) drop(l *lease) {
	e := l.e
	last := len(e.leases) - 1
	e.leases[l.idx] = e.leases[last]
	e.leases[l.idx].idx = l.idx
	e.leases[last] = nil
	e.leases = e.leases[:last]
	e.own -= l.slots
	s.byRule[e.k.rule] -= l.slots
	l.idx = -1
	delete(s.leases, l.id)
	s.changed(e)
}

// changed marks e's own count changed, to be sent at the next flush when
// its rule is of pop scope. Requires s.mu held.
func (s *slotTable) changed(e *slotEntry) {
	if !e.share {
		return
	}
	if _, ok := s.dirty[e.k]; ok || len(s.dirty) < s.maxLeases {
		s.dirty[e.k] = struct{}{}
	}
}

// tidy deletes e from the table when it holds nothing. Requires s.mu held.
func (s *slotTable) tidy(e *slotEntry) {
	if len(e.leases) == 0 && len(e.peers) == 0 {
		delete(s.keys, e.k)
	}
}

// entry returns the key's entry, creating it when create. Requires s.mu
// held.
func (s *slotTable) entry(k slotKey, create bool) *slotEntry {
	e := s.keys[k]
	if e == nil && create {
		e = &slotEntry{k: k}
		e.leases = e.one[:0]
		s.keys[k] = e
	}
	return e
}

// sweep expires every key's leases and members' counts at now and drops
// the keys left empty (Tick).
func (s *slotTable) sweep(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.keys {
		s.expire(e, now)
		s.tidy(e)
	}
}

// dropRule forgets every lease and count of rule id (its ID may serve
// another rule next).
func (s *slotTable) dropRule(id crdt.RuleID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.keys {
		if k.rule != id {
			continue
		}
		for _, l := range e.leases {
			l.idx = -1
			delete(s.leases, l.id)
		}
		s.peers -= len(e.peers)
		delete(s.keys, k)
		delete(s.dirty, k)
	}
	delete(s.byRule, id)
}

func (s *slotTable) stats() SlotStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Leases, st.MaxLeases, st.PeerCounts, st.Keys = len(s.leases), s.maxLeases, s.peers, len(s.keys)
	return st
}
