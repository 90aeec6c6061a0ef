package crdt

import (
	"sync/atomic"

	"github.com/geolimit/geolimit/identity"
)

// memberSet is a bit per ReplicaID: set when the replica is a member, another
// node of the store's own PoP. Replaced (never changed in place) when it grows.
type memberSet struct{ w []atomic.Uint64 }

// Intern returns the ReplicaID of r, assigning one if r is new. ok is false
// when the replica table is full.
func (s *Store) Intern(r identity.Replica) (id ReplicaID, ok bool) {
	s.repMu.RLock()
	id, ok = s.repIDs[r]
	s.repMu.RUnlock()
	if ok {
		return id, true
	}
	s.repMu.Lock()
	defer s.repMu.Unlock()
	if id, ok = s.repIDs[r]; ok {
		return id, true
	}
	node, pop := nodeOf(r), popOf(r)
	if s.perNode[node] >= s.maxIncarnations || s.perPoP[pop] >= s.maxReplicasByPoP ||
		len(s.repFree) == 0 && len(s.reps) >= s.maxReplicas {
		s.refused.Add(1)
		return 0, false
	}
	s.perNode[node]++
	s.perPoP[pop]++
	if n := len(s.repFree); n > 0 {
		id = s.repFree[n-1]
		s.repFree = s.repFree[:n-1]
		s.repIDs[r] = id
		s.reps[id] = r
		s.setMember(id, s.memberOf(r))
		setBit(&s.regional, id, s.regionalOf(r))
		return id, true
	}
	id = ReplicaID(len(s.reps))
	s.repIDs[r] = id
	s.reps = append(s.reps, r)
	s.nreps.Store(int32(len(s.reps)))
	s.setMember(id, s.memberOf(r))
	setBit(&s.regional, id, s.regionalOf(r))
	return id, true
}

// A sender's part of the table of replicas.
//
// A PoP's credentials let it claim any incarnation of any of its nodes and
// any epoch of its aggregate. Intern holds at most MaxIncarnations of one
// node (or aggregate) and MaxReplicasPerPoP of one PoP, and refuses the
// newest beyond them: forgetting the oldest instead would either drop live
// counts (a G-counter never loses any) or cost a walk of the store for
// every invented incarnation. ForgetReplicas frees the ones no live key
// holds a count of, so a real restart refused during a flood of invented
// incarnations gets its place back once the flood's counts have passed,
// and a flood refused here never takes a place from another PoP.

// nodeOf returns r without its incarnation: the node (or aggregate) whose
// incarnations Intern counts together.
func nodeOf(r identity.Replica) identity.Replica { r.Incarnation = 0; return r }

// popOf returns the PoP of r, whose replicas Intern counts together.
func popOf(r identity.Replica) identity.Replica { return identity.Replica{PoPID: r.PoPID} }

// unintern undoes the counts of Intern for r; the caller holds repMu.
func (s *Store) unintern(r identity.Replica) {
	for _, c := range []struct {
		m map[identity.Replica]int
		k identity.Replica
	}{{s.perNode, nodeOf(r)}, {s.perPoP, popOf(r)}} {
		if c.m[c.k]--; c.m[c.k] <= 0 {
			delete(c.m, c.k)
		}
	}
}

// InternCache remembers the ID a store gave one replica, for a caller that
// hears from the same replica over and over (a remote PoP's aggregate): a
// hit skips the store's table of replicas, a look-up that takes a few cache
// misses when many replicas are known. The zero value is empty. An
// InternCache is not safe for concurrent use.
type InternCache struct {
	s   *Store
	r   identity.Replica
	id  ReplicaID
	gen uint64
}

// InternCached is Intern through c, which holds the last replica looked up
// through it. A cached ID holds until ForgetReplicas frees any.
func (s *Store) InternCached(r identity.Replica, c *InternCache) (ReplicaID, bool) {
	gen := s.repGen.Load()
	if c.s == s && c.gen == gen && c.r == r {
		return c.id, true
	}
	id, ok := s.Intern(r)
	if ok {
		*c = InternCache{s: s, r: r, id: id, gen: gen}
	}
	return id, ok
}

// memberOf reports whether r is a member: another node of the own PoP (any
// incarnation but the store's own), not an aggregate.
func (s *Store) memberOf(r identity.Replica) bool {
	return r != s.self && r.SamePoP(s.self) && !r.IsPoP()
}

func (s *Store) isMember(id ReplicaID) bool { return s.members.Load().has(id) }

// setMember records whether id is a member, and whether the allowance
// leaves it out; the caller holds repMu.
func (s *Store) setMember(id ReplicaID, member bool) {
	setBit(&s.members, id, member)
	if s.exclude != nil {
		setBit(&s.excluded, id, member == false && s.exclude(s.reps[id]))
	}
}

// setBit sets or clears id's bit of the set p points to, growing it (a new
// set, never changed in place but for its bits) when needed.
func setBit(p *atomic.Pointer[memberSet], id ReplicaID, on bool) {
	m := p.Load()
	i := int(id >> 6)
	if i >= len(m.w) {
		if !on {
			return
		}
		grown := &memberSet{w: make([]atomic.Uint64, max(2*len(m.w), i+1))}
		for j := range m.w {
			grown.w[j].Store(m.w[j].Load())
		}
		p.Store(grown)
		m = grown
	}
	bit := uint64(1) << (id & 63)
	if on {
		m.w[i].Or(bit)
	} else {
		m.w[i].And(^bit)
	}
}

// Replica returns the identity behind id.
func (s *Store) Replica(id ReplicaID) identity.Replica {
	s.repMu.RLock()
	defer s.repMu.RUnlock()
	if int(id) < len(s.reps) {
		return s.reps[id]
	}
	return identity.Replica{}
}

// Replicas returns every interned replica identity, self first.
func (s *Store) Replicas() []identity.Replica {
	s.repMu.RLock()
	defer s.repMu.RUnlock()
	out := make([]identity.Replica, 0, len(s.repIDs))
	for _, r := range s.reps {
		if r != (identity.Replica{}) {
			out = append(out, r)
		}
	}
	return out
}

// ReplicaCount returns how many replica identities are interned, self included.
func (s *Store) ReplicaCount() int {
	s.repMu.RLock()
	defer s.repMu.RUnlock()
	return len(s.repIDs)
}

// ForgetReplicas drops the interned replicas (past incarnations, nodes gone)
// that no live key holds a count of, so that their IDs can be reused and the
// table never fills up over a long life of restarts. It returns how many it
// dropped. The caller must make sure no Merge runs meanwhile (an ID handed out
// by Intern but not yet merged would look unused).
func (s *Store) ForgetReplicas() int {
	used := map[ReplicaID]bool{SelfID: true}
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for _, l := range sh.side.lists {
			for _, e := range l.entries() {
				used[e.rep()] = true
			}
		}
		sh.mu.Unlock()
	}
	s.repMu.Lock()
	defer s.repMu.Unlock()
	n := 0
	for id, r := range s.reps {
		if used[ReplicaID(id)] || r == (identity.Replica{}) {
			continue
		}
		delete(s.repIDs, r)
		s.unintern(r)
		s.reps[id] = identity.Replica{}
		s.setMember(ReplicaID(id), false)
		s.repFree = append(s.repFree, ReplicaID(id))
		n++
	}
	if n > 0 {
		s.repGen.Add(1)
	}
	return n
}

// DropReplica removes every count of replica r and returns how many entries
// it removed. A G-counter never loses counts; this is for counts that were
// merged under an identity later found to be the store's own: a node that
// learns its PoP's epoch drops what it merged of its own PoP's aggregate for
// that epoch, since it holds the same counts per member.
func (s *Store) DropReplica(r identity.Replica) int {
	s.repMu.RLock()
	id, ok := s.repIDs[r]
	s.repMu.RUnlock()
	if !ok || id == SelfID {
		return 0
	}
	n := 0
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for i := range sh.slots {
			if sh.slots[i].flags&flagSide == 0 {
				continue
			}
			es := sh.side.get(int32(i))
			kept := es[:0]
			for _, e := range es {
				if e.rep() != id {
					kept = append(kept, e)
				}
			}
			if len(kept) == len(es) {
				continue
			}
			n += len(es) - len(kept)
			sl := &sh.slots[i]
			sl.other = [2]uint64{}
			for _, e := range kept {
				if k := e.win(sl.win) - (sl.win - 1); k == 0 || k == 1 {
					sl.other[k] = satAdd(sl.other[k], e.count)
				}
			}
			if len(kept) == 0 {
				sh.side.del(int32(i))
				sl.flags &^= flagSide
			} else {
				sh.setSide(int32(i), kept)
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// ReplicasRefused returns how many replica identities Intern has refused
// (StoreStats.ReplicasRefused), without locking the shards.
func (s *Store) ReplicasRefused() uint64 { return s.refused.Load() }
