package crdt

import (
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

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
	Self Replica
	// MaxKeys caps the live (rule, key) pairs held, across all rules.
	// Default DefaultMaxKeys.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Default 64.
	Shards int
	// MaxReplicas caps how many distinct remote replica identities (including
	// past incarnations) the store interns. Default 65536.
	MaxReplicas int
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
	self        Replica
	seed        maphash.Seed // key hash seed when fixedSeed is 0
	fixedSeed   uint64       // StoreConfig.Seed
	shards      []shard
	shardShift  uint
	maxReplicas int
	// nreps is len(reps), for merges to read without repMu (sideSearch).
	nreps atomic.Int32

	repMu   sync.RWMutex
	repIDs  map[Replica]ReplicaID
	repFree []ReplicaID // forgotten IDs, reused by Intern
	reps    []Replica
	// repGen changes whenever an ID is forgotten (and may then name
	// another replica): an InternCache of another generation is stale.
	repGen  atomic.Uint64
	members atomic.Pointer[memberSet] // written under repMu, read anywhere
	// excluded is the replicas the allowance leaves out (SetExcluded): nil
	// for none. exclude decides for replicas interned later.
	excluded atomic.Pointer[memberSet]
	exclude  func(Replica) bool

	hotPerShard int          // hot entries per shard (see allowance.go)
	lastFlush   atomic.Int64 // the time of the last FlushAt
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
	// HotKeys is the number of keys holding near-limit allowance state.
	HotKeys int
	// TableBytes is the size of the shards' slot tables (with the lists
	// of their remote entries laid out beside them, see sideTable), OffHeapBytes the part of it
	// outside the Go heap (see offheap.go), ArenaBytes the size
	// of the arenas of long keys.
	TableBytes, OffHeapBytes, ArenaBytes int
}

const (
	flagSide uint8 = 1 << iota
	flagInDirty
	flagLive
	flagHot // the key has an entry in shard.hot (see allowance.go)
	// flagRecent: a flush sent the own counts within the allowance's
	// horizon, so the other replicas may not hold them yet (see sentRec).
	flagRecent

	// The top three bits of flags hold half of the slot's sentSeq.
	sentSeqShift = 5
)

// inlineKeyLen is the longest key stored inside its slot (IPv4 addresses fit);
// longer keys live in their shard's arena (see table.go).
const inlineKeyLen = 18

// longKey marks a slot whose key is in its shard's arena.
const longKey = 0xff

// slot is one (rule, key): exactly one cache line, no pointers (the GC never
// scans the slab), holding everything a decision reads.
type slot struct {
	win   int64     // index of the key's current window
	own   [2]uint64 // this replica's counts: [0] window win-1, [1] window win
	other [2]uint64 // sum over other replicas, same layout
	rule  RuleID
	klen  uint8 // key length, or longKey
	dirty uint8 // what changed since the last flush: dirtyOwn0 ... dirtyPoP2; see sentSeq
	flags uint8
	mark  uint8 // markDenied0, markDenied1: see evict.go
	kb    [inlineKeyLen]byte
}

// Bits of slot.dirty.
const (
	// dirtyOwn0 and dirtyOwn1: own[0] and own[1] changed.
	dirtyOwn0 uint8 = 1 << iota
	dirtyOwn1
	// dirtyPoP0, 1 and 2: the PoP total of window win-1, win and win+1
	// changed (a member's clock may run a window ahead of the key's).
	dirtyPoP0
	dirtyPoP1
	dirtyPoP2

	dirtyOwn = dirtyOwn0 | dirtyOwn1
	dirtyAll = dirtyOwn | dirtyPoP0 | dirtyPoP1 | dirtyPoP2
)

// shiftDirty returns dirty bits of a slot moved on by d > 0 windows (the
// bits above dirtyAll are kept).
func shiftDirty(dirty uint8, d int64) uint8 {
	if d >= 3 {
		return dirty &^ dirtyAll
	}
	own, pop := dirty&dirtyOwn, dirty>>2&7
	return own>>d | (pop>>d)<<2 | dirty&^dirtyAll
}

// sentSeq returns the sequence number, modulo 64, of the flush that last
// sent the slot's own counts: three bits above dirtyAll in dirty, three
// above sentSeqShift in flags.
func (sl *slot) sentSeq() uint8 { return sl.dirty>>5 | (sl.flags>>sentSeqShift)<<3 }

func (sl *slot) setSentSeq(seq uint8) {
	sl.dirty = sl.dirty&dirtyAll | (seq&7)<<5
	sl.flags = sl.flags&^(7<<sentSeqShift) | (seq>>3&7)<<sentSeqShift
}

func (sl *slot) total() uint64 {
	return satAdd(satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1]))
}

// sideEntry is one remote replica's count of one window of a key: 16 bytes,
// as a key of a fleet of hundreds of PoPs holds hundreds of them.
type sideEntry struct {
	count uint64
	// w is the low 32 bits of the window index: a key's entries lie within
	// one window of its slot's, so the slot's window gives back the rest
	// (win).
	w uint32
	// rm is the ReplicaID, with sideMember set when the replica is a member
	// (see Store.isMember; fixed while the replica is interned).
	rm uint32
}

// sideMember marks a member's sideEntry; ReplicaIDs stay below it.
const sideMember = 1 << 31

func newSideEntry(win int64, rep ReplicaID, count uint64, member bool) sideEntry {
	e := sideEntry{count: count, w: uint32(win), rm: uint32(rep)}
	if member {
		e.rm |= sideMember
	}
	return e
}

// win returns the entry's window index, given near, the window of its
// slot (or any index within 2^31 of the entry's).
func (e *sideEntry) win(near int64) int64 { return near + int64(int32(e.w-uint32(near))) }

func (e *sideEntry) rep() ReplicaID { return ReplicaID(e.rm &^ sideMember) }

func (e *sideEntry) member() bool { return e.rm&sideMember != 0 }

// memberSet is a bit per ReplicaID: set when the replica is a member, another
// node of the store's own PoP. Replaced (never changed in place) when it grows.
type memberSet struct{ w []atomic.Uint64 }

// shard is an open-addressing hash table whose buckets are the slots
// themselves (table.go). A decision hashes the key once and usually finds it
// in the first slot it reads: one cache line.
//
// Slot positions move when the table grows or shrinks and when a deletion
// shifts a probe run back; the side structures keyed by position (remote
// replicas' entries, hot keys) move with them, and a moved slot still marked dirty is
// listed again at its new position.
type shard struct {
	// The first two cache lines hold what a look-up and a merge read:
	// PrefetchShard prefetches both, and PrefetchSlot loads base, n and
	// sideBase from the first (the line that holds the lock and the table
	// too), ahead of the merge that uses them.
	mu sync.Mutex
	// base and n are the table's address and length, written under mu
	// with slots and read without it by Prefetch: a stale pair only
	// prefetches the wrong line.
	base atomic.Uintptr
	n    atomic.Int64
	// sideBase is where side.lists is, for the same prefetch; 0 for none.
	sideBase atomic.Uintptr
	slots    []slot // the table; live slots have flagLive
	// work is set while dirty or sent may hold something (noteWork), so
	// that Flush and Pending pass a shard with nothing to do without
	// locking it: a node of many shards and few changing keys flushes in
	// time of the keys, not of the shards.
	work atomic.Bool

	side  sideTable
	used  int
	arena []byte // the long keys (table.go)

	mapped *offHeap // slots' mapping outside the heap, or nil (offheap.go)
	// arenaDead is how many bytes of arena removed keys left.
	arenaDead int
	dirty     []int32
	now       []int64 // by RuleID: the latest window index seen
	count     []int   // by RuleID: live keys
	cap       int     // the most live keys: the shard's part of MaxKeys
	cur       int     // eviction cursor
	// agg is, by RuleID, the one counter of the rule's keys that found no
	// room (see evict.go).
	agg []aggregate
	// hot maps the position of a slot with flagHot to its entry in
	// hotSlab; hotFree lists free entries, hotCur is hot eviction's cursor.
	hot     map[int32]int32
	hotSlab []hotEntry
	hotFree []int32
	hotCur  int
	// sent lists, oldest first from sentHead, the flushes that sent own
	// counts; once older than the horizon they clear flagRecent.
	sent     []sentRec
	sentHead int
	// Pads the shard to whole cache lines on 64-bit machines (352 bytes
	// of fields), with a spare line between neighbours' hot lines.
	_ [32 + 64]byte
}

// noteWork marks the shard as having work for Flush; the caller holds sh.mu
// and has just listed something in dirty or sent.
func (sh *shard) noteWork() {
	if !sh.work.Load() {
		sh.work.Store(true)
	}
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
		repIDs:      map[Replica]ReplicaID{cfg.Self: SelfID},
		reps:        []Replica{cfg.Self},
	}
	s.members.Store(&memberSet{})
	s.rules.Store(&ruleTable{})
	s.repGen.Store(1) // a zero InternCache is empty
	s.nreps.Store(1)
	for i := range s.shards {
		sh := &s.shards[i]
		// MaxKeys split over the shards: the first ones take the remainder.
		sh.cap = cfg.MaxKeys / p
		if i < cfg.MaxKeys%p {
			sh.cap++
		}
		sh.setSlots(initialSlots)
		sh.hot = map[int32]int32{}
	}
	return s
}

// Self returns the store's own replica identity.
func (s *Store) Self() Replica { return s.self }

// Intern returns the ReplicaID of r, assigning one if r is new. ok is false
// when the replica table is full.
func (s *Store) Intern(r Replica) (id ReplicaID, ok bool) {
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
	if n := len(s.repFree); n > 0 {
		id = s.repFree[n-1]
		s.repFree = s.repFree[:n-1]
		s.repIDs[r] = id
		s.reps[id] = r
		s.setMember(id, s.memberOf(r))
		return id, true
	}
	if len(s.reps) >= s.maxReplicas {
		return 0, false
	}
	id = ReplicaID(len(s.reps))
	s.repIDs[r] = id
	s.reps = append(s.reps, r)
	s.nreps.Store(int32(len(s.reps)))
	s.setMember(id, s.memberOf(r))
	return id, true
}

// InternCache remembers the ID a store gave one replica, for a caller that
// hears from the same replica over and over (a remote PoP's aggregate): a
// hit skips the store's table of replicas, a look-up that takes a few cache
// misses when many replicas are known. The zero value is empty. An
// InternCache is not safe for concurrent use.
type InternCache struct {
	s   *Store
	r   Replica
	id  ReplicaID
	gen uint64
}

// InternCached is Intern through c, which holds the last replica looked up
// through it. A cached ID holds until ForgetReplicas frees any.
func (s *Store) InternCached(r Replica, c *InternCache) (ReplicaID, bool) {
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
func (s *Store) memberOf(r Replica) bool {
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
func (s *Store) Replica(id ReplicaID) Replica {
	s.repMu.RLock()
	defer s.repMu.RUnlock()
	if int(id) < len(s.reps) {
		return s.reps[id]
	}
	return Replica{}
}

// hash mixes the rule into the key's hash so equal keys of different rules
// land apart. With a fixed seed the key's hash is xxhash mixed with the seed:
// deterministic, where maphash's seed cannot be chosen. (Admit inlines the
// maphash case by hand: with both cases hash is too big to inline.)
func (s *Store) hash(rule RuleID, key string) uint64 {
	if s.fixedSeed == 0 {
		return maphash.String(s.seed, key) ^ ruleMix(rule)
	}
	return mix64(xxhash.Sum64String(key)^s.fixedSeed) ^ ruleMix(rule)
}

// ruleMix is what a key's hash is xored with for rule.
func ruleMix(rule RuleID) uint64 { return (uint64(rule) + 1) * 0x9e3779b97f4a7c15 }

// mix64 is splitmix64's finalizer: a bijection that spreads every input bit
// over the output.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (s *Store) shardOf(h uint64) *shard { return &s.shards[h>>s.shardShift&uint64(len(s.shards)-1)] }

// roll advances slot i to window target > sl.win; the caller holds sh.mu.
func (sh *shard) roll(i int32, sl *slot, target int64) {
	if target > sh.now[sl.rule] {
		sh.now[sl.rule] = target
	}
	if target == sl.win+1 {
		sl.own[0], sl.own[1] = sl.own[1], 0
		sl.other[0], sl.other[1] = sl.other[1], 0
	} else {
		sl.own = [2]uint64{}
		sl.other = [2]uint64{}
	}
	sl.dirty = shiftDirty(sl.dirty, target-sl.win)
	sl.mark = shiftMark(sl.mark, target-sl.win)
	prev := sl.win // the entries lie within one window of it
	sl.win = target
	if sl.flags&flagSide == 0 {
		return
	}
	old := sh.side.get(i)
	es := old[:0]
	sl.other = [2]uint64{}
	for _, e := range old {
		w := e.win(prev)
		if w < target-1 || w > target+1 {
			continue
		}
		es = append(es, e)
		if k := w - (target - 1); k == 0 || k == 1 {
			sl.other[k] = satAdd(sl.other[k], e.count)
		}
	}
	if len(es) == 0 {
		sh.side.del(i)
		sl.flags &^= flagSide
		return
	}
	sh.setSide(i, es)
}

// AdmitResult is the outcome of Admit.
type AdmitResult struct {
	window.Result
	// Untracked is set when the key is new and the store had no room for
	// it: the request was decided, and counted when admitted, by the one
	// counter the rule's keys without room share (see evict.go).
	Untracked bool
}

// Admit decides a request of cost against limit for (rule, key) at now and,
// when it fits and count is true, adds cost to this replica's own count of the
// current window. If now lies before the key's current window (the clock went
// backwards) the request is decided at the start of the key's current window
// and counted there, so counts never move back in time.
func (s *Store) Admit(rule RuleID, key string, now Now, limit, cost uint64, count bool) AdmitResult {
	return s.admit(rule, key, now, limit, cost, count, nil)
}

func (s *Store) admit(rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) AdmitResult {
	var h uint64
	if s.fixedSeed == 0 {
		h = maphash.String(s.seed, key) ^ ruleMix(rule) // s.hash, inlined
	} else {
		h = s.hash(rule, key)
	}
	var res AdmitResult
	s.admitHashed(&res, h, rule, key, now, limit, cost, count, a)
	return res
}

// Hash returns the hash of (rule, key) and prefetches the slot where a look-up
// of it starts, so that a caller with other work to do before it decides
// (AdmitSplitHashed) overlaps that work with the memory access.
func (s *Store) Hash(rule RuleID, key string) uint64 {
	h := s.hash(rule, key)
	s.PrefetchShard(h)
	s.PrefetchSlot(h)
	return h
}

// KeyHash returns the hash of (rule, key) that the ...Hashed methods take,
// and touches no memory of the store. With PrefetchShard and PrefetchSlot it
// lets a caller with several keys to merge (a received delta) take their
// cache misses together rather than one after another: hash and
// PrefetchShard every key, then PrefetchSlot every key, then merge.
func (s *Store) KeyHash(rule RuleID, key string) uint64 { return s.hash(rule, key) }

// PrefetchShard prefetches the lines of h's shard that a merge reads,
// without waiting for them.
func (s *Store) PrefetchShard(h uint64) {
	sh := s.shardOf(h)
	prefetch(uintptr(unsafe.Pointer(sh)))
	prefetch(uintptr(unsafe.Pointer(&sh.side)))
}

// PrefetchSlot prefetches the slot where a look-up of h starts, and its
// list of remote counts; it reads h's shard (PrefetchShard it first).
func (s *Store) PrefetchSlot(h uint64) {
	sh := s.shardOf(h)
	if n := sh.n.Load(); n > 0 {
		p := uintptr(home(h, int(n)))
		prefetch(sh.base.Load() + p*unsafe.Sizeof(slot{}))
		if sb := sh.sideBase.Load(); sb != 0 {
			prefetch(sb + p*unsafe.Sizeof([]sideEntry(nil)))
		}
	}
}

// AdmitSplitHashed is AdmitSplit with h, the Hash of (rule, key), writing
// its result to *res: a decision's hot path does not copy it back.
func (s *Store) AdmitSplitHashed(res *AdmitResult, h uint64, rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) {
	s.admitHashed(res, h, rule, key, now, limit, cost, count, a)
}

func (s *Store) admitHashed(res *AdmitResult, h uint64, rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) {
	sh := s.shardOf(h)
	sh.mu.Lock()
	i, ok := sh.find(h, rule, key)
	res.Untracked = false
	r := &res.Result
	if !ok {
		if !count && sh.used >= sh.cap {
			// A check of a new key in a full shard: counted, it may find
			// no room (evictFor decides that, and only when counting), so
			// it is checked as a key without room, against the rule's
			// shared counter, which errs towards rejecting.
			*r = sh.admitUntracked(s, rule, now, limit, cost, false)
			res.Untracked = true
			sh.mu.Unlock()
			return
		}
		// A key new here has no own admits unseen: the allowance lets it in.
		window.DecideTo(r, limit, cost, 0, 0, now.Elapsed, now.Width)
		if !r.Allowed || !count {
			sh.mu.Unlock()
			return
		}
		if i, ok = sh.insert(s, h, rule, key, now.Index); !ok {
			*r = sh.admitUntracked(s, rule, now, limit, cost, true)
			res.Untracked = true
			sh.mu.Unlock()
			return
		}
	}
	sl := &sh.slots[i]
	elapsed := now.Elapsed
	if now.Index > sl.win {
		sh.roll(i, sl, now.Index)
	} else if now.Index < sl.win {
		elapsed = 0
	}
	window.DecideTo(r, limit, cost, satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1]), elapsed, now.Width)
	if r.Allowed && a != nil {
		// Far from the limit the slot alone clears the request: this
		// replica's own counts, unseen or not, within 1/Replicas of the
		// headroom. Otherwise its share decides (allowance.go).
		if own := satAdd(sl.own[0], sl.own[1]); own != 0 && a.on() &&
			float64(satAdd(own, cost))*float64(a.Replicas()) > float64(limit)-r.Estimate {
			sh.decideSplit(s, a, i, sl, now, elapsed, limit, cost, r)
		}
	}
	if r.Allowed && count {
		sl.own[1] = satAdd(sl.own[1], cost)
		sh.markDirty(i, sl, dirtyOwn1|dirtyPoP1)
	} else if count {
		sl.mark |= markDenied1
	}
	sh.mu.Unlock()
}

// MergeOutcome says what Merge did with an entry.
type MergeOutcome uint8

// Merge outcomes.
const (
	// Merged: the entry raised the replica's count.
	Merged MergeOutcome = iota
	// Unchanged: the entry was not above the count already known.
	Unchanged
	// Stale: the entry's window is older than the live windows.
	Stale
	// Ahead: the entry's window is more than one window ahead of now.
	Ahead
	// Full: the key is new and the store is full, or the key already holds
	// MaxReplicasPerKey entries; the entry was dropped.
	Full
	// Self: the entry claims this store's own replica and was ignored.
	Self
)

// MaxReplicasPerKey caps the per-replica entries one key holds over its live
// windows, so that senders inventing incarnations cannot grow one key without
// bound; entries past it are dropped as Full.
const MaxReplicasPerKey = 1024

// markDirty sets bits of slot i's dirty marks and lists the slot for Flush;
// the caller holds sh.mu.
func (sh *shard) markDirty(i int32, sl *slot, bits uint8) {
	sl.dirty |= bits
	if sl.flags&flagInDirty == 0 {
		sl.flags |= flagInDirty
		sh.dirty = append(sh.dirty, i)
		sh.noteWork()
	}
}

// Merge raises replica rep's count of (rule, key, window win) to count if count
// is higher (the G-counter merge: per-replica maximum). nowIndex is the
// receiver's current window index for the rule. When rep is a member, a
// raised count marks the window's PoP total changed for Flush.
func (s *Store) Merge(rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) MergeOutcome {
	return s.MergeHashed(s.hash(rule, key), rule, key, nowIndex, win, rep, count)
}

// MergeHashed is Merge with h, the Hash of (rule, key): a caller merging a
// batch hashes the next entry's key, which prefetches its slot, before it
// merges the current one.
func (s *Store) MergeHashed(h uint64, rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) MergeOutcome {
	if rep == SelfID {
		return Self
	}
	if win < nowIndex-1 {
		return Stale
	}
	if win > nowIndex+1 {
		return Ahead
	}
	if count == 0 {
		return Unchanged // never above what is known; holds no entry
	}
	sh := s.shardOf(h)
	sh.mu.Lock()
	o := sh.merge(s, h, rule, key, nowIndex, win, rep, count)
	sh.mu.Unlock() // not deferred: a deferred method value costs a merge a call through a wrapper
	return o
}

// merge is MergeHashed's work under sh.mu.
func (sh *shard) merge(s *Store, h uint64, rule RuleID, key string, nowIndex, win int64, rep ReplicaID, count uint64) MergeOutcome {
	i, ok := sh.find(h, rule, key)
	if !ok {
		if i, ok = sh.insert(s, h, rule, key, nowIndex); !ok {
			return Full
		}
	}
	sl := &sh.slots[i]
	if nowIndex > sl.win {
		sh.roll(i, sl, nowIndex)
	}
	if win < sl.win-1 {
		return Stale
	}
	if win > sl.win+1 {
		return Ahead
	}
	es := sh.side.get(i)
	j := sideSearch(es, rep, win, int(s.nreps.Load()))
	found := j < len(es) && es[j].rep() == rep && es[j].win(win) == win
	var diff uint64
	var member bool
	if found {
		if count <= es[j].count {
			return Unchanged
		}
		diff = count - es[j].count
		es[j].count = count
		member = es[j].member()
	} else {
		if len(es) >= MaxReplicasPerKey {
			return Full
		}
		member = s.isMember(rep)
		sh.setSide(i, slices.Insert(es, j, newSideEntry(win, rep, count, member)))
		sl.flags |= flagSide
		diff = count
	}
	k := win - (sl.win - 1) // 0, 1 or 2
	if k == 0 || k == 1 {
		sl.other[k] = satAdd(sl.other[k], diff)
	}
	if member {
		sh.markDirty(i, sl, dirtyPoP0<<k)
	}
	return Merged
}

// expired reports whether slot i holds nothing live at window nowIndex of
// its rule: its windows are all before nowIndex-1, including the window
// after its own, which a remote replica whose clock runs ahead may have
// counted in. The caller holds sh.mu.
func (sh *shard) expired(i int32, sl *slot, nowIndex int64) bool {
	switch {
	case sl.win >= nowIndex-1:
		return false
	case sl.win+1 < nowIndex-1 || sl.flags&flagSide == 0:
		return true
	}
	for _, e := range sh.side.get(i) {
		if e.win(sl.win) > sl.win {
			return false
		}
	}
	return true
}

// popTotals returns the PoP totals of windows win-1, win and win+1 of slot i:
// the own count plus the members' counts. The caller holds sh.mu.
func (sh *shard) popTotals(i int32, sl *slot) [3]uint64 {
	t := [3]uint64{sl.own[0], sl.own[1], 0}
	if sl.flags&flagSide == 0 {
		return t
	}
	for _, e := range sh.side.get(i) {
		if !e.member() {
			continue
		}
		if k := e.win(sl.win) - (sl.win - 1); k >= 0 && k < 3 {
			t[k] = satAdd(t[k], e.count)
		}
	}
	return t
}

// FlushEntry is one (rule, key, window) of this store handed out by Flush,
// Own, Entries or Totals.
type FlushEntry struct {
	Rule   RuleID
	Key    string
	Window int64
	// Count is this replica's own count (Entries: the reported replica's).
	Count uint64
	// PoP is the PoP total: the own count plus the member replicas' counts of
	// this window.
	PoP uint64
	// Changed says which of Count and PoP changed since the last Flush (Flush
	// only); Own and Entries set OwnChanged, Totals PoPChanged.
	Changed Changed
}

// Changed is a set of FlushEntry values that changed.
type Changed uint8

// Changed bits.
const (
	// OwnChanged: the own count (FlushEntry.Count) changed.
	OwnChanged Changed = 1 << iota
	// PoPChanged: the PoP total (FlushEntry.PoP) changed.
	PoPChanged
)

// Flush calls fn for each (rule, key, window) whose own count or PoP total
// changed since the last Flush, and clears the change marks. An own count
// changes by Admit, which changes the PoP total as well; the PoP total also
// changes when Merge raises a member's count, so an entry may have only
// PoPChanged, with an own count of 0. Changes to counts of 0 are not
// reported. The windows are the key's previous and current windows, and the
// one after when a member's clock runs ahead.
//
// Under each shard's lock Flush only copies the changed counts out; fn runs
// after the lock is released, so building deltas never holds up decisions. Flush
// is safe for concurrent use, but concurrent Flush calls are serialised.
func (s *Store) Flush(fn func(FlushEntry)) { s.flush(0, 0, fn) }

// FlushAt is Flush at time at (the clock of AdmitSplit's times): it also
// records, for the keys near their limit, the own counts this flush sends,
// which the near-limit allowance counts as held by the other replicas once
// its horizon has passed. horizon is the allowance's (see Allowance); it
// only says which recorded flushes later decisions may still need.
func (s *Store) FlushAt(at, horizon int64, fn func(FlushEntry)) { s.flush(at, horizon, fn) }

func (s *Store) flush(at, horizon int64, fn func(FlushEntry)) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if at != 0 {
		s.lastFlush.Store(at)
		s.flushSeq++
	}
	for si := range s.shards {
		sh := &s.shards[si]
		if !sh.work.Load() {
			continue // a change made meanwhile goes with the next flush
		}
		recs, keys := s.flushBuf[:0], s.flushKeys[:0]
		sh.mu.Lock()
		for _, i := range sh.dirty {
			sl := &sh.slots[i]
			if sl.flags&flagInDirty == 0 {
				continue // evicted, or already flushed
			}
			sl.flags &^= flagInDirty
			if at != 0 {
				if sl.flags&flagHot != 0 {
					sh.hotSlab[sh.hot[i]].push(at, horizon, sl.win, sl.own)
				}
				if sl.dirty&dirtyOwn != 0 {
					sh.sentNow(s, at, s.flushSeq, i, sl)
				}
			}
			if sl.dirty&dirtyAll == 0 {
				continue
			}
			kb := sh.keyBytes(i)
			recs = append(recs, flushRec{rule: sl.rule, koff: uint32(len(keys)), klen: uint32(len(kb)),
				win: sl.win, own: sl.own, pop: sh.popTotals(i, sl), dirty: sl.dirty})
			keys = append(keys, kb...)
			sl.dirty &^= dirtyAll
		}
		sh.dirty = trimmed(sh.dirty)
		if at != 0 {
			sh.expireSent(s, at-horizon)
		}
		sh.work.Store(len(sh.dirty) > 0 || sh.sentHead < len(sh.sent))
		sh.mu.Unlock()
		all := string(keys) // one allocation for the keys of the shard's entries
		for k := range recs {
			r := &recs[k]
			key := all[r.koff : r.koff+r.klen]
			for w := range r.pop {
				var e FlushEntry
				if w < 2 && r.dirty&(dirtyOwn0<<w) != 0 && r.own[w] > 0 {
					e.Changed |= OwnChanged
				}
				if r.dirty&(dirtyPoP0<<w) != 0 && r.pop[w] > 0 {
					e.Changed |= PoPChanged
				}
				if e.Changed == 0 {
					continue
				}
				e.Rule, e.Key, e.Window, e.PoP = r.rule, key, r.win-1+int64(w), r.pop[w]
				if w < 2 {
					e.Count = r.own[w]
				}
				fn(e)
			}
		}
		s.flushBuf, s.flushKeys = trimmed(recs), trimmed(keys)
	}
}

// trimmed returns buf emptied, or nil when its capacity is four times what
// it last held and more than a little: a burst of changes does not keep its
// buffers for ever.
func trimmed[T any](buf []T) []T {
	if cap(buf) > 4*len(buf)+1024 {
		return nil
	}
	return buf[:0]
}

// flushRec is a changed slot copied out under its shard's lock.
type flushRec struct {
	win   int64
	own   [2]uint64
	pop   [3]uint64
	koff  uint32 // the key, in the flush's key buffer
	klen  uint32
	rule  RuleID
	dirty uint8
}

// Own calls fn for every own count in a live window: the anti-entropy set that
// repairs lost deltas and teaches joiners. nowIndex returns the current window
// index of a rule (it runs under a shard lock). Like Flush, Own copies under
// each shard's lock and calls fn after releasing it.
func (s *Store) Own(nowIndex func(RuleID) int64, fn func(FlushEntry)) {
	s.OwnPart(nowIndex, 0, 1, fn)
}

// OwnPart is Own over one part of the store: the keys of the shards of part
// (0 <= part < parts) when the shards are cut in parts runs of about equal
// length. The parts 0 to parts-1 of one parts hold every key once, so a
// caller can spread a walk of a large store over time (Parts).
func (s *Store) OwnPart(nowIndex func(RuleID) int64, part, parts int, fn func(FlushEntry)) {
	lo, hi := s.partShards(part, parts)
	s.entries(nowIndex, walkOwn, lo, hi, func(_ ReplicaID, e FlushEntry) { fn(e) })
}

// partShards returns the shards [lo, hi) of part of parts.
func (s *Store) partShards(part, parts int) (lo, hi int) {
	if parts < 1 || part < 0 || part >= parts {
		return 0, 0
	}
	n := len(s.shards)
	return part * n / parts, (part + 1) * n / parts
}

// Parts returns how many parts (OwnPart, TotalsPart) a walk of the store is
// best cut in for parts of about perPart keys each: at least 1, at most the
// number of shards.
func (s *Store) Parts(perPart int) int {
	keys := 0
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		keys += sh.used
		sh.mu.Unlock()
	}
	if perPart < 1 {
		return 1
	}
	return min(max((keys+perPart-1)/perPart, 1), len(s.shards))
}

// Entries calls fn for every per-replica count in a live window, own and
// remote: the full state a joining or restarted peer needs. Count is the
// reported replica's count and PoP the store's PoP total of that window.
// nowIndex runs under a shard lock; fn runs after it is released (see Own).
func (s *Store) Entries(nowIndex func(RuleID) int64, fn func(ReplicaID, FlushEntry)) {
	s.entries(nowIndex, walkAll, 0, len(s.shards), fn)
}

// entryRec is one count copied out by entries under its shard's lock; slot
// indexes the record of the slot in a shard's walk whose key it has.
type entryRec struct {
	win   int64
	count uint64
	pop   uint64
	slot  int32
	rep   ReplicaID
	rule  RuleID
}

// What entries walks.
const (
	walkOwn    = iota // the own counts (Own)
	walkAll           // the own and the other replicas' counts (Entries)
	walkTotals        // the PoP totals (Totals)
)

// entries is Own, Entries and Totals over the shards [lo, hi). Under each
// shard's lock it copies counts and key bytes into reused buffers, sized
// before locking, so that a walk of a large store seldom holds a lock across
// an allocation (which may assist the garbage collector) and never across a
// callback; a lock is held for one shard's copy at a time.
func (s *Store) entries(nowIndex func(RuleID) int64, walk, lo, hi int, fn func(ReplicaID, FlushEntry)) {
	changed := OwnChanged
	if walk == walkTotals {
		changed = PoPChanged
	}
	// The copies are scratch, kept between walks: a part of an
	// anti-entropy round walks a few shards every few milliseconds, and
	// buffers sized afresh for a shard's every key (most of which, on most
	// nodes, are other replicas' and give no record) were most of the
	// round's garbage.
	ws := walkScratch.Get().(*walkBufs)
	defer walkScratch.Put(ws)
	recs, keys, kb := ws.recs[:0], ws.keys[:0], ws.kb[:0] // keys: a slot's key, in kb
	defer func() { ws.recs, ws.keys, ws.kb = recs[:0], keys[:0], kb[:0] }()
	if lo < hi && cap(recs) == 0 {
		// A new scratch's first copy is sized from its first shard's keys:
		// a key gives up to three records (Entries: more), and most keys
		// are short.
		sh := &s.shards[lo]
		sh.mu.Lock()
		n := sh.used
		sh.mu.Unlock()
		recs, keys, kb = make([]entryRec, 0, 3*n), make([]walkKey, 0, n), make([]byte, 0, 16*n)
	}
	for si := lo; si < hi; si++ {
		sh := &s.shards[si]
		// Shards hold about as many keys each: room for twice the last
		// shard's copy, made before locking, keeps growth out of the lock.
		if cap(recs) < 2*len(recs) {
			recs = make([]entryRec, 0, 2*len(recs))
		}
		if cap(keys) < 2*len(keys) {
			keys = make([]walkKey, 0, 2*len(keys))
		}
		if cap(kb) < 2*len(kb) {
			kb = make([]byte, 0, 2*len(kb))
		}
		recs, keys, kb = recs[:0], keys[:0], kb[:0]
		sh.mu.Lock()
		for i := range sh.slots {
			sl := &sh.slots[i]
			if sl.flags&flagLive == 0 {
				continue
			}
			cur := nowIndex(sl.rule)
			if sl.win+1 < cur-1 {
				continue // nothing live
			}
			at := len(recs)
			pop := sh.popTotals(int32(i), sl)
			if walk == walkTotals {
				for k, p := range pop {
					if w := sl.win - 1 + int64(k); p > 0 && w >= cur-1 {
						var c uint64
						if k < 2 {
							c = sl.own[k]
						}
						recs = append(recs, entryRec{win: w, count: c, pop: p, slot: int32(len(keys)), rep: SelfID, rule: sl.rule})
					}
				}
			} else {
				for k, c := range sl.own {
					if w := sl.win - 1 + int64(k); c > 0 && w >= cur-1 {
						recs = append(recs, entryRec{win: w, count: c, pop: pop[k], slot: int32(len(keys)), rep: SelfID, rule: sl.rule})
					}
				}
			}
			if walk == walkAll && sl.flags&flagSide != 0 {
				for _, e := range sh.side.get(int32(i)) {
					if w := e.win(sl.win); w >= cur-1 {
						var p uint64
						if k := w - (sl.win - 1); k >= 0 && k < 3 {
							p = pop[k]
						}
						recs = append(recs, entryRec{win: w, count: e.count, pop: p, slot: int32(len(keys)), rep: e.rep(), rule: sl.rule})
					}
				}
			}
			if len(recs) > at {
				k := sh.keyBytes(int32(i))
				keys = append(keys, walkKey{off: uint32(len(kb)), len: uint32(len(k))})
				kb = append(kb, k...)
			}
		}
		sh.mu.Unlock()
		// The anti-entropy walks' keys live as long as their batch: one
		// string holds a shard's. Entries' keys may be kept (a partition's
		// shares keep some): each has its own.
		joined := ""
		if walk != walkAll {
			joined = string(kb)
		}
		key, last := "", int32(-1)
		for _, r := range recs {
			if r.slot != last {
				k := keys[r.slot]
				if walk == walkAll {
					key = string(kb[k.off : k.off+k.len])
				} else {
					key = joined[k.off : k.off+k.len]
				}
				last = r.slot
			}
			fn(r.rep, FlushEntry{Rule: r.rule, Key: key, Window: r.win, Count: r.count, PoP: r.pop, Changed: changed})
		}
	}
}

// walkKey is where entries copied a slot's key in its key buffer.
type walkKey struct{ off, len uint32 }

// walkBufs are the scratch buffers of a walk (entries); none holds a
// pointer, so a pooled one keeps nothing alive.
type walkBufs struct {
	recs []entryRec
	keys []walkKey
	kb   []byte
}

var walkScratch = sync.Pool{New: func() any { return new(walkBufs) }}

// Totals calls fn for every PoP total above 0 in a live window, with Count
// the own count of that window: the anti-entropy set of a PoP's aggregate.
// nowIndex returns the current window index of a rule (it runs under a shard
// lock). Like Flush, Totals copies under each shard's lock and calls fn after
// releasing it, so fn may block or call into the store.
func (s *Store) Totals(nowIndex func(RuleID) int64, fn func(FlushEntry)) {
	s.TotalsPart(nowIndex, 0, 1, fn)
}

// TotalsPart is Totals over one part of the store (see OwnPart).
func (s *Store) TotalsPart(nowIndex func(RuleID) int64, part, parts int, fn func(FlushEntry)) {
	lo, hi := s.partShards(part, parts)
	s.entries(nowIndex, walkTotals, lo, hi, func(_ ReplicaID, e FlushEntry) { fn(e) })
}

// Sweep removes every key whose windows have all passed (see shard.expired):
// nowIndex returns the current window index of a rule. It returns how many
// keys it removed.
func (s *Store) Sweep(nowIndex func(RuleID) int64) int {
	n := s.removeIf(func(sh *shard, i int32, sl *slot) bool { return sh.expired(i, sl, nowIndex(sl.rule)) })
	s.expired.Add(uint64(n))
	return n
}

// DropRule removes every key of rule (the rule was deleted or redefined).
func (s *Store) DropRule(rule RuleID) {
	s.removeIf(func(_ *shard, _ int32, sl *slot) bool { return sl.rule == rule })
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		if int(rule) < len(sh.now) {
			sh.now[rule] = math.MinInt64
		}
		if int(rule) < len(sh.agg) {
			sh.agg[rule] = aggregate{}
		}
		sh.mu.Unlock()
	}
	s.forgetRule(rule)
}

func (s *Store) removeIf(drop func(*shard, int32, *slot) bool) int {
	n := 0
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for i := 0; i < len(sh.slots); i++ {
			if sl := &sh.slots[i]; sl.flags&flagLive != 0 && drop(sh, int32(i), sl) {
				sh.remove(s, int32(i))
				n++
				i-- // a later slot of the run may have shifted into i
			}
		}
		if len(sh.dirty) > 2*len(sh.slots)+64 {
			// Evictions left stale marks; keep only slots still marked.
			d := sh.dirty[:0]
			for _, i := range sh.dirty {
				if sh.slots[i].flags&flagInDirty != 0 {
					sh.slots[i].flags &^= flagInDirty
					d = append(d, i)
				}
			}
			for _, i := range d {
				sh.slots[i].flags |= flagInDirty
			}
			sh.dirty = d
		}
		sh.shrink(s)
		sh.mu.Unlock()
	}
	return n
}

// WindowView is one window of one key as seen by this store.
type WindowView struct {
	Index    int64
	Total    uint64
	Replicas map[string]uint64 // by Replica.String()
}

// View returns the live windows of (rule, key) relative to nowIndex, oldest
// first, with per-replica counts, without changing anything. ok is false when
// the key is not held.
func (s *Store) View(rule RuleID, key string, nowIndex int64) (views []WindowView, ok bool) {
	h := s.hash(rule, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	i, found := sh.find(h, rule, key)
	if !found {
		sh.mu.Unlock()
		return nil, false
	}
	sl := sh.slots[i]
	side := append([]sideEntry(nil), sh.side.get(i)...)
	sh.mu.Unlock()
	byWin := map[int64]*WindowView{}
	add := func(w int64, rep string, c uint64) {
		v := byWin[w]
		if v == nil {
			v = &WindowView{Index: w, Replicas: map[string]uint64{}}
			byWin[w] = v
		}
		v.Replicas[rep] = c
		v.Total = satAdd(v.Total, c)
	}
	self := s.self.String()
	for k, c := range sl.own {
		if w := sl.win - 1 + int64(k); c > 0 && w >= nowIndex-1 {
			add(w, self, c)
		}
	}
	for _, e := range side {
		if w := e.win(sl.win); w >= nowIndex-1 {
			add(w, s.Replica(e.rep()).String(), e.count)
		}
	}
	for _, v := range byWin {
		views = append(views, *v)
	}
	sort.Slice(views, func(a, b int) bool { return views[a].Index < views[b].Index })
	return views, true
}

// Stats returns the store's counters.
func (s *Store) Stats() StoreStats {
	st := StoreStats{Evicted: s.evicted.Load(), Overflow: s.overflow.Load(), Expired: s.expired.Load(),
		UntrackedDenied: s.untrackedDenied.Load()}
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		st.Keys += sh.used
		st.HotKeys += len(sh.hot)
		st.TableBytes += len(sh.slots)*int(unsafe.Sizeof(slot{})) + 24*len(sh.side.lists)
		st.OffHeapBytes += sh.offHeapBytes()
		st.ArenaBytes += cap(sh.arena)
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

// Replicas returns every interned replica identity, self first.
func (s *Store) Replicas() []Replica {
	s.repMu.RLock()
	defer s.repMu.RUnlock()
	out := make([]Replica, 0, len(s.repIDs))
	for _, r := range s.reps {
		if r != (Replica{}) {
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
		for _, es := range sh.side.lists {
			for _, e := range es {
				used[e.rep()] = true
			}
		}
		sh.mu.Unlock()
	}
	s.repMu.Lock()
	defer s.repMu.Unlock()
	n := 0
	for id, r := range s.reps {
		if used[ReplicaID(id)] || r == (Replica{}) {
			continue
		}
		delete(s.repIDs, r)
		s.reps[id] = Replica{}
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
func (s *Store) DropReplica(r Replica) int {
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

// Pending returns about how many keys changed since the last Flush (an upper
// bound: a key evicted after its change still counts until the next Flush).
func (s *Store) Pending() int {
	n := 0
	for si := range s.shards {
		sh := &s.shards[si]
		if !sh.work.Load() {
			continue
		}
		sh.mu.Lock()
		n += len(sh.dirty)
		sh.mu.Unlock()
	}
	return n
}
