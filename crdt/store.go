package crdt

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/window"
)

// RuleID is the store's handle for a rule. The caller (package pop) maps rule
// names to RuleIDs; the store only needs them to be small integers.
type RuleID uint16

// MaxRules is the number of distinct RuleIDs a store accepts.
const MaxRules = 1 << 12

// ReplicaID is the store's interned handle for a Replica. SelfID is the store's
// own replica.
type ReplicaID uint32

// SelfID is the ReplicaID of the store's own replica.
const SelfID ReplicaID = 0

// Now locates an instant for one rule: the current window index, the
// nanoseconds elapsed in it and the window width in nanoseconds.
type Now struct {
	Index   int64
	Elapsed int64
	Width   int64
}

// StoreConfig configures a Store. The zero value of every field but Self means
// its default.
type StoreConfig struct {
	// Self is this node's replica identity (with its incarnation).
	Self identity.Replica
	// MaxKeys caps the live (rule, key) pairs held, across all rules.
	// Default DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two, at most 2^19. Default 64.
	Shards int
	// MaxReplicas caps how many distinct remote replica identities (including
	// past incarnations) the store interns. Default 65536.
	MaxReplicas int
	// MaxBytes caps the bytes the store accounts for (StoreStats.Bytes):
	// its tables, remote entries, long keys and sketches; see budget.go.
	// Zero means no cap but MaxKeys.
	MaxBytes int
	// MaxIncarnations caps the incarnations of one node, or the epochs of
	// one PoP's aggregate, interned at once; MaxReplicasPerPoP caps the
	// replica identities of one PoP (its nodes' incarnations and its
	// aggregate's epochs), so that one PoP's credentials, inventing
	// incarnations or node names, fill no more of the MaxReplicas than
	// that. A replica beyond either is refused (Intern reports the table
	// full) until ForgetReplicas frees one. Defaults
	// DefaultMaxIncarnations and DefaultMaxReplicasPerPoP.
	MaxIncarnations, MaxReplicasPerPoP int
	// MaxHotKeys caps the keys near their limit that keep the side state of
	// the near-limit allowance (see AdmitSplit). Default DefaultMaxHotKeys;
	// negative keeps none.
	MaxHotKeys int
	// Seed, when non-zero, makes the store deterministic: key placement,
	// eviction and every other choice the store makes are a function of the
	// seed and the inputs, so the same calls in the same order give the same
	// state and outputs (for simulation). Zero draws a random seed per store,
	// so that keys chosen by a remote client cannot be aimed at one probe run;
	// a store holding keys from the network must use zero.
	Seed uint64
}

// DefaultMaxKeys is the default cap on live keys.
const DefaultMaxKeys = 1 << 20

// Defaults of StoreConfig.MaxIncarnations and MaxReplicasPerPoP.
const (
	DefaultMaxIncarnations   = 8
	DefaultMaxReplicasPerPoP = 1024
)

// Store is a sharded set of windowed G-counters, keyed by (rule, key). For each
// key it keeps two live windows (the current one and the one before it); a
// window one ahead of the key's current window is kept for peers whose clocks
// run ahead. Older windows are dropped, and late entries for them ignored.
//
// On the hot path a key is one pointer-free slot holding this replica's own
// count and the sum of the others per window; the per-replica entries of remote
// replicas live in a side table touched only by Merge and window roll-over.
//
// Besides each own count, the store tracks the PoP total of each window (the
// own count plus the counts of the members: the other nodes of the own PoP)
// without storing it: Flush and Totals sum it from the side table, and a
// slot's change marks say whether the own count, the PoP total or both
// changed since the last Flush.
//
// Near its limit a key may also hold allowance state (AdmitSplit, see
// allowance.go): the own counts of its last flushes, in a side table keyed by
// slot position and bounded by MaxHotKeys, so that the slot stays one cache
// line and a key far from its limit costs nothing more.
//
// Memory is bounded by MaxKeys, split over the shards and, inside a shard,
// over the rules: each rule is guaranteed an equal share of the room and may
// borrow free room beyond it, which it loses first. A key being limited (at
// or above its rule's protection threshold, SetProtect, or denied in its
// live windows) keeps its count, unless it holds borrowed room that another
// rule needs back. A new key that finds no room is decided by, and counted
// in, one counter its rule's other keys without room share in the shard
// (reported Untracked): however many keys flood a rule, a key is never
// admitted more than the rule's limit per window. evict.go has the details.
//
// A Store is safe for concurrent use.
type Store struct {
	self        identity.Replica
	seed        maphash.Seed // key hash seed when fixedSeed is 0
	fixedSeed   uint64       // StoreConfig.Seed
	shards      []shard
	shardShift  uint
	maxReplicas int
	// nreps is len(reps), for merges to read without repMu (sideSearch).
	nreps atomic.Int32

	repMu   sync.RWMutex
	repIDs  map[identity.Replica]ReplicaID
	repFree []ReplicaID // forgotten IDs, reused by Intern
	reps    []identity.Replica

	// perNode and perPoP count the interned replicas of a node (or PoP
	// aggregate), any incarnation, and of a PoP (see intern.go).
	perNode, perPoP                   map[identity.Replica]int
	maxIncarnations, maxReplicasByPoP int
	refused                           atomic.Uint64

	// repGen changes whenever an ID is forgotten (and may then name
	// another replica): an InternCache of another generation is stale.
	repGen  atomic.Uint64
	members atomic.Pointer[memberSet] // written under repMu, read anywhere
	// regional is the replicas whose counts make up the own region's total
	// (regionalOf), written under repMu, read anywhere.
	regional atomic.Pointer[memberSet]
	// excluded is the replicas the allowance leaves out (SetExcluded): nil
	// for none. exclude decides for replicas interned later.
	excluded atomic.Pointer[memberSet]
	exclude  func(identity.Replica) bool

	hotPerShard int          // hot entries per shard (see allowance.go)
	lastFlush   atomic.Int64 // the time of the last FlushAt
	flushGap    atomic.Int64 // the time between FlushAt calls, a decaying mean
	born        atomic.Int64 // the first decision with an allowance (unborn: none yet)
	flushSeq    uint8        // FlushAt calls so far, modulo 256 (under flushMu)

	rulesMu sync.Mutex // serialises changes of rules
	rules   atomic.Pointer[ruleTable]

	flushMu   sync.Mutex // serialises Flush, which reuses flushBuf and flushKeys
	flushBuf  []flushRec
	flushKeys []byte

	evicted         atomic.Uint64
	overflow        atomic.Uint64
	expired         atomic.Uint64
	untrackedDenied atomic.Uint64
}

// StoreStats are cumulative counters of a Store.
type StoreStats struct {
	// Keys is the number of live (rule, key) pairs.
	Keys int
	// Evicted counts keys evicted to make room for a new one.
	Evicted uint64
	// Overflow counts new keys (or merged entries) refused because the store
	// was full and nothing could be evicted: their requests were decided by
	// their rule's aggregate (AdmitResult.Untracked).
	Overflow uint64
	// UntrackedDenied counts the requests of keys without room that their
	// rule's aggregate denied.
	UntrackedDenied uint64
	// Expired counts keys removed by Sweep because all their windows had passed.
	Expired uint64
	// Replicas is the number of interned replica identities, self included.
	Replicas int
	// ReplicasRefused counts replica identities Intern refused: the table,
	// or its sender's part of it (MaxIncarnations, MaxReplicasPerPoP), was
	// full.
	ReplicasRefused uint64
	// HotKeys is the number of keys holding near-limit allowance state.
	HotKeys int
	// TableBytes is the size of the shards' slot tables (with the lists
	// of their remote entries laid out beside them, see sideTable), OffHeapBytes the part of it
	// outside the Go heap (see offheap.go), ArenaBytes the size
	// of the arenas of long keys.
	TableBytes, OffHeapBytes, ArenaBytes int
	// SideBytes is the size of the remote entries (by capacity).
	SideBytes int
	// SketchBytes is the size of the sketches of evicted keys' counts
	// (sketch.go).
	SketchBytes int
}

// Bytes is what the store accounts for against StoreConfig.MaxBytes: the
// tables, remote entries, long keys and sketches.
func (st StoreStats) Bytes() int {
	return st.TableBytes + st.SideBytes + st.ArenaBytes + st.SketchBytes
}

// NewStore returns an empty store.
func NewStore(cfg StoreConfig) *Store {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	n := cfg.Shards
	if n <= 0 {
		n = 64
	}
	n = min(n, 1<<maxShardBits)
	p, bits := 1, 0
	for p < n {
		p <<= 1
		bits++
	}
	if cfg.MaxReplicas <= 0 {
		cfg.MaxReplicas = 1 << 16
	}
	if int64(cfg.MaxReplicas) >= sideMember {
		cfg.MaxReplicas = sideMember - 1
	}
	if cfg.MaxIncarnations <= 0 {
		cfg.MaxIncarnations = DefaultMaxIncarnations
	}
	if cfg.MaxReplicasPerPoP <= 0 {
		cfg.MaxReplicasPerPoP = DefaultMaxReplicasPerPoP
	}
	if cfg.MaxHotKeys == 0 {
		cfg.MaxHotKeys = DefaultMaxHotKeys
	}
	s := &Store{
		self:        cfg.Self,
		seed:        maphash.MakeSeed(),
		fixedSeed:   cfg.Seed,
		shards:      make([]shard, p),
		shardShift:  uint(64 - bits),
		maxReplicas: cfg.MaxReplicas,
		hotPerShard: max((cfg.MaxHotKeys+p-1)/p, 0),
		repIDs:      map[identity.Replica]ReplicaID{cfg.Self: SelfID},
		perNode:     map[identity.Replica]int{nodeOf(cfg.Self): 1},
		perPoP:      map[identity.Replica]int{popOf(cfg.Self): 1},

		maxIncarnations:  cfg.MaxIncarnations,
		maxReplicasByPoP: cfg.MaxReplicasPerPoP,
		reps:             []identity.Replica{cfg.Self},
	}
	s.members.Store(&memberSet{})
	s.regional.Store(&memberSet{})
	s.rules.Store(&ruleTable{})
	s.repGen.Store(1) // a zero InternCache is empty
	s.born.Store(unborn)
	s.nreps.Store(1)
	for i := range s.shards {
		sh := &s.shards[i]
		// MaxKeys split over the shards: the first ones take the remainder.
		sh.cap = cfg.MaxKeys / p
		if i < cfg.MaxKeys%p {
			sh.cap++
		}
		sh.maxBytes = cfg.MaxBytes / p
		sh.budgeted = sh.maxBytes > 0
		sh.setSlots(initialSlots)
		sh.hot = map[int32]int32{}
	}
	return s
}

// Self returns the store's own replica identity.
func (s *Store) Self() identity.Replica { return s.self }

// Stats returns the store's counters.
func (s *Store) Stats() StoreStats {
	st := StoreStats{Evicted: s.evicted.Load(), Overflow: s.overflow.Load(), Expired: s.expired.Load(),
		UntrackedDenied: s.untrackedDenied.Load(), ReplicasRefused: s.refused.Load()}
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		st.Keys += sh.used
		st.HotKeys += len(sh.hot)
		st.TableBytes += len(sh.slots)*int(unsafe.Sizeof(slot{})) + sideListSize*len(sh.side.lists)
		st.OffHeapBytes += sh.offHeapBytes()
		st.ArenaBytes += cap(sh.arena)
		st.SketchBytes += sh.sketchBytes
		st.SideBytes += sh.side.bytes
		sh.mu.Unlock()
	}
	s.repMu.RLock()
	st.Replicas = len(s.repIDs)
	s.repMu.RUnlock()
	return st
}

// KeysByRule returns the number of live keys of each rule that has any.
func (s *Store) KeysByRule() map[RuleID]int {
	out := map[RuleID]int{}
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for r, c := range sh.count {
			if c > 0 {
				out[RuleID(r)] += c
			}
		}
		sh.mu.Unlock()
	}
	return out
}

func satAdd(a, b uint64) uint64 { return window.SatAdd(a, b) }
