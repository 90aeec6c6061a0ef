package repl

import (
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
)

// peer is what a node knows of one remote PoP.
type peer struct {
	id        identity.PoPID
	expected  bool
	lastHeard int64 // receiver's clock; 0 = never
	// heardSince is when it was heard first after its last silence
	// (receiver's clock; crash.go).
	heardSince int64
	heardOnce  bool
	lastBeat   int64 // the latest heartbeat's SentAt (the sender's clock)
	epoch      uint64
	down       bool
	// back: heard again after a silence, its epoch not seen since;
	// crashed: its last silence ended under a new epoch, heard at
	// crashedAt (crash.go).
	back, crashed bool
	crashedAt     int64
	// gone: its last member said goodbye, sent at goneSent (the sender's
	// clock); taken for down until heard again (goodbye.go).
	gone     bool
	goneSent int64
	// mateSaw is the latest time (receiver's clock) a PoP of its region
	// listed it as heard; listedAt when this PoP's last list arrived
	// (mates.go).
	mateSaw, listedAt int64
	// counted: counts from it were merged (a live window of a rule this
	// node has). A PoP heard only through heartbeats and sync requests has
	// no traffic share: its silence cuts no share (see Core.counts) and it
	// is not served before those that have one.
	counted   bool
	relayedAt int64
	relayed   bool
	// relayedTo is the epoch the PoP had at the last relay: a PoP that
	// restarted since (a new epoch) gets its former totals at once.
	relayedTo uint64
	// answered holds, per node of the PoP that asked for a sync, when the
	// re-send that answers it is due; at most maxRequesters entries.
	answered map[identity.Replica]int64
	// lag is the age its messages arrive at (allowance.go).
	lag lagTracker
	// marked is the epoch of this node that the PoP's last marker answered
	// (startup.go).
	marked uint64
	// drift is what its heartbeats say of its rules and clock (drift.go).
	drift peerDrift
	// sender is the node's ID of the replica its deltas came from last.
	sender crdt.InternCache
	// slot is its place in the tables indexed by PoP (lagMax), given by
	// peerTable.add and reused once it is deleted.
	slot int32
}

// peerTable holds the states of the remote PoPs a core tracks. Every
// message from another PoP looks its sender up, so get goes through a
// direct-mapped cache of the states by a hash of the ID before the map:
// one read of the cache and the state it points to, where a map look-up
// takes a few dependent cache misses on a node that handles messages of
// hundreds of PoPs (and a simulator that runs hundreds of such nodes). A
// colliding ID only falls back to the map.
type peerTable struct {
	m     map[identity.PoPID]*peer
	cache []*peer // by popHash(id) & (len-1); nil, or a state in m
	// gen changes whenever a PoP is added or deleted (Core.regionMates).
	gen uint64
	// slots is one more than the highest slot given; free holds the
	// slots of the PoPs deleted, for the next ones added.
	slots int32
	free  []int32
}

// The cache has at least minCache entries and grows to keep at least
// twice as many as there are PoPs; it stays small enough to span few pages.
const minCache = 64

func newPeerTable() peerTable {
	return peerTable{m: map[identity.PoPID]*peer{}, cache: make([]*peer, minCache)}
}

// get returns id's state, nil for none.
func (t *peerTable) get(id identity.PoPID) *peer {
	c := &t.cache[popHash(id)&uint64(len(t.cache)-1)]
	if p := *c; p != nil && p.id == id {
		return p
	}
	p := t.m[id]
	if p != nil {
		*c = p
	}
	return p
}

// add tracks p as id's state.
func (t *peerTable) add(id identity.PoPID, p *peer) {
	p.id = id
	if k := len(t.free); k > 0 {
		p.slot, t.free = t.free[k-1], t.free[:k-1]
	} else {
		p.slot = t.slots
		t.slots++
	}
	t.m[id] = p
	t.gen++
	if len(t.m)*2 > len(t.cache) {
		t.cache = make([]*peer, len(t.cache)*2) // refilled by get
	}
	t.cache[popHash(id)&uint64(len(t.cache)-1)] = p
}

// del forgets id.
func (t *peerTable) del(id identity.PoPID) {
	if c := &t.cache[popHash(id)&uint64(len(t.cache)-1)]; *c != nil && (*c).id == id {
		*c = nil
	}
	if p := t.m[id]; p != nil {
		t.free = append(t.free, p.slot)
	}
	delete(t.m, id)
	t.gen++
}

// popHash is FNV-1a over the region, a separator and the PoP name. It only
// spreads IDs over the cache: crafted collisions cost look-ups in the map.
func popHash(id identity.PoPID) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(id.Region); i++ {
		h = (h ^ uint64(id.Region[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(id.PoP); i++ {
		h = (h ^ uint64(id.PoP[i])) * prime
	}
	return h ^ h>>29
}
