// Package memos is the replicated state of idempotency keys: remembered
// decisions, a bounded table of them, their merge rule and their section
// of the wire format. See the notes below the imports.
//
// Trust: any member of a PoP may send any memo it holds (memos never leave
// the PoP); a memo's Until is clamped by the receiver to what the rule's
// TTL allows (package pop).
package memos

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/wire/codec"
)

// Remembered decisions (idempotency keys).
//
// A request that names an idempotency key is decided once: its decision is
// remembered per (rule, key, idempotency key) until a time (its Until), and
// a request that names the same triple again gets the same decision without
// counting anything. A remembered decision is a Memo; the table of them is
// Table.
//
// A memo is identified within its rule by a ID: 128 bits of SHA-256 over
// the length-prefixed key and idempotency key. Every node derives the same
// ID, so an ID is all the wire needs, the table's entries are of one fixed
// size whatever the keys, and two triples whose IDs collide (which would let
// a request pass as another's repeat) take a search of about 2^64 hashes to
// find.
//
// Merging two memos of one ID keeps the one decided first: the one whose
// Until is earlier (every node remembers a decision for the same TTL), the
// allowed one on a tie. That is commutative, associative and idempotent, so
// memos travel like counts: lost, duplicated and reordered.

// ID identifies a remembered decision within its rule (IDOf).
type ID [16]byte

// maxMemoInput is the most bytes IDOf hashes without allocating: a
// key and an idempotency key of codec.MaxKeyLen each, a cost and a tier of
// codec.MaxKeyLen.
const maxMemoInput = 2 + codec.MaxKeyLen + 2 + codec.MaxKeyLen + 8 + 2 + codec.MaxKeyLen

// IDOf returns the ID of key's decision under idempotency key idem for
// a request of cost under tier: a retry that asks for more (a larger
// cost, another tier) is another request, not a repeat. Every part is
// length-prefixed or of fixed size, so that no two lists hash the same
// input. Parts longer than codec.MaxKeyLen are hashed whole (with an
// allocation); callers keep them within it.
func IDOf(key, idem string, cost uint64, tier string) ID {
	var buf [maxMemoInput]byte
	b := buf[:0]
	if n := 14 + len(key) + len(idem) + len(tier); n > maxMemoInput {
		b = make([]byte, 0, n)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(min(len(key), 0xffff)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint16(b, uint16(min(len(idem), 0xffff)))
	b = append(b, idem...)
	b = binary.BigEndian.AppendUint64(b, cost)
	b = binary.BigEndian.AppendUint16(b, uint16(min(len(tier), 0xffff)))
	b = append(b, tier...)
	sum := sha256.Sum256(b)
	return ID(sum[:16])
}

// Verdict is a remembered decision's outcome, a set of flags.
type Verdict uint8

const (
	// Allowed: the request was allowed.
	Allowed Verdict = 1 << iota
	// ShadowDenied: a shadow rule would have denied it (and allowed it).
	ShadowDenied
	// verdictAll are the flags a Verdict may hold.
	verdictAll = Allowed | ShadowDenied
)

// Memo is one remembered decision on the wire: the decision of ID under
// Rule was Verdict, remembered until Until (Unix nanoseconds).
type Memo struct {
	Rule    string
	ID      ID
	Until   int64
	Verdict Verdict
}

// Merge merges two memos of one ID, (until, verdict) each: the one
// decided first (the earlier Until) wins, the one with the larger verdict
// (allowed) on a tie. It is commutative, associative and idempotent; a
// zero until is its identity (no memo).
func Merge(au int64, av Verdict, bu int64, bv Verdict) (int64, Verdict) {
	switch {
	case au <= 0:
		return bu, bv
	case bu <= 0:
		return au, av
	case au < bu:
		return au, av
	case bu < au:
		return bu, bv
	}
	return au, max(av, bv)
}

// Outcome says what Table.Put did.
type Outcome uint8

// Outcomes of Table.Put.
const (
	// Merged: the memo is new or replaced the one held (decided earlier).
	Merged Outcome = iota
	// Unchanged: the table held the same decision or one decided first.
	Unchanged
	// Refused: the memo is new, the table is full, and it would be the
	// first to be forgotten: it was dropped.
	Refused
)

// memoShards is the most shards of a Table table: idempotent requests on
// several cores rarely meet on one lock.
const memoShards = 16

type memoKey struct {
	rule crdt.RuleID
	id   ID
}

// memoSlot is 32 bytes: until first, so that the key packs after it.
type memoSlot struct {
	until int64
	k     memoKey
	v     Verdict
	dirty bool // put with mark since the last Drain
}

// memoShard is a min-heap of memos by Until and an index of their places
// in it.
type memoShard struct {
	mu      sync.Mutex
	at      map[memoKey]int32
	heap    []memoSlot
	dirty   []memoKey // keys marked dirty, in the order put; may hold removed keys
	max     int
	evicted uint64
	refused uint64
	_       [64]byte // apart from the next shard's lock
}

// Table is a bounded table of remembered decisions, one per (rule, ID).
// Memory is bounded by the cap given to NewTable: a new memo that finds its
// part of the table full forgets the memo that expires first (or is itself
// dropped when it would expire first). Each memo takes about
// BytesPerEntry bytes.
//
// A Table is safe for concurrent use.
type Table struct {
	shards []memoShard
	mask   uint8
}

// DefaultMax is the cap of a Table table made with max <= 0.
const DefaultMax = crdt.DefaultMaxKeys / 4

// BytesPerEntry is about what one memo costs in memory, index and heap
// together, once the table is full (measured, TestMemosMemoryBound).
const BytesPerEntry = 160

// NewTable returns an empty table holding at most max memos
// (DefaultMax if max <= 0).
func NewTable(max int) *Table {
	if max <= 0 {
		max = DefaultMax
	}
	n := 1
	for n*2 <= min(max, memoShards) {
		n *= 2
	}
	m := &Table{shards: make([]memoShard, n), mask: uint8(n - 1)}
	for i := range m.shards {
		s := &m.shards[i]
		s.max = max / n
		if i < max%n {
			s.max++
		}
		s.at = map[memoKey]int32{}
	}
	return m
}

func (m *Table) shard(id *ID) *memoShard { return &m.shards[id[0]&m.mask] }

// Get returns the verdict remembered for id under rule, and whether one is
// remembered beyond now. It does not allocate.
func (m *Table) Get(rule crdt.RuleID, id ID, now int64) (Verdict, bool) {
	s := m.shard(&id)
	s.mu.Lock()
	i, ok := s.at[memoKey{rule, id}]
	var v Verdict
	if ok {
		sl := &s.heap[i]
		ok, v = sl.until > now, sl.v
	}
	s.mu.Unlock()
	return v, ok
}

// Put merges a memo of id under rule (Merge) at now: a memo held that
// expired at or before now is replaced, as if forgotten already. With mark,
// a memo that is new or changes is handed to the next Drain (a decision
// this node took; memos learnt from peers are not re-sent by Drain). until
// <= now changes nothing.
func (m *Table) Put(now int64, rule crdt.RuleID, id ID, until int64, v Verdict, mark bool) Outcome {
	if until <= now || until <= 0 {
		return Unchanged
	}
	k := memoKey{rule, id}
	s := m.shard(&id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.at[k]; ok {
		sl := &s.heap[i]
		if sl.until <= now {
			sl.until, sl.v = until, v
			s.mark(int(i), mark)
			s.down(int(i)) // later than it was
			return Merged
		}
		u, nv := Merge(sl.until, sl.v, until, v)
		if u == sl.until && nv == sl.v {
			return Unchanged
		}
		sl.until, sl.v = u, nv
		s.mark(int(i), mark)
		s.up(int(i)) // until only ever comes earlier
		return Merged
	}
	if s.max == 0 {
		s.refused++
		return Refused
	}
	if len(s.heap) >= s.max {
		if until < s.heap[0].until {
			s.refused++
			return Refused
		}
		s.remove(0)
		s.evicted++
	}
	s.heap = append(s.heap, memoSlot{until: until, k: k, v: v})
	i := len(s.heap) - 1
	s.at[k] = int32(i)
	s.mark(i, mark)
	s.up(i)
	return Merged
}

// mark hands slot i to the next Drain when mark is set.
func (s *memoShard) mark(i int, mark bool) {
	if !mark || s.heap[i].dirty {
		return
	}
	s.heap[i].dirty = true
	s.dirty = append(s.dirty, s.heap[i].k)
	if len(s.dirty) > 2*s.max+16 {
		// Evictions left stale keys behind: keep the list within the cap.
		kept := s.dirty[:0]
		for _, k := range s.dirty {
			if j, ok := s.at[k]; ok && s.heap[j].dirty {
				kept = append(kept, k)
			}
		}
		s.dirty = slicesCompactKeys(kept)
	}
}

// slicesCompactKeys drops repeated keys from ks, keeping the first of each.
func slicesCompactKeys(ks []memoKey) []memoKey {
	seen := make(map[memoKey]struct{}, len(ks))
	out := ks[:0]
	for _, k := range ks {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

func (s *memoShard) less(i, j int) bool { return s.heap[i].until < s.heap[j].until }

func (s *memoShard) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.at[s.heap[i].k] = int32(i)
	s.at[s.heap[j].k] = int32(j)
}

func (s *memoShard) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *memoShard) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// remove drops slot i.
func (s *memoShard) remove(i int) {
	last := len(s.heap) - 1
	delete(s.at, s.heap[i].k)
	if i != last {
		s.heap[i] = s.heap[last]
		s.at[s.heap[i].k] = int32(i)
	}
	s.heap[last] = memoSlot{}
	s.heap = s.heap[:last]
	if i != last {
		s.down(i)
		s.up(i)
	}
}

// Drain calls fn with every memo put with mark since the last Drain that
// is still held, and clears the marks. fn must not call m's methods.
func (m *Table) Drain(fn func(rule crdt.RuleID, id ID, until int64, v Verdict)) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, k := range s.dirty {
			j, ok := s.at[k]
			if !ok || !s.heap[j].dirty {
				continue
			}
			sl := &s.heap[j]
			sl.dirty = false
			fn(k.rule, k.id, sl.until, sl.v)
		}
		clear(s.dirty)
		s.dirty = s.dirty[:0]
		s.mu.Unlock()
	}
}

// Each calls fn with every memo remembered beyond now, in no particular
// order. fn must not call m's methods.
func (m *Table) Each(now int64, fn func(rule crdt.RuleID, id ID, until int64, v Verdict)) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, sl := range s.heap {
			if sl.until > now {
				fn(sl.k.rule, sl.k.id, sl.until, sl.v)
			}
		}
		s.mu.Unlock()
	}
}

// Sweep forgets the memos remembered until now or earlier and returns how
// many.
func (m *Table) Sweep(now int64) int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for len(s.heap) > 0 && s.heap[0].until <= now {
			s.remove(0)
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// DropRule forgets every memo of rule.
func (m *Table) DropRule(rule crdt.RuleID) {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		kept := s.heap[:0]
		for _, sl := range s.heap {
			if sl.k.rule == rule {
				delete(s.at, sl.k)
			} else {
				kept = append(kept, sl)
			}
		}
		clear(s.heap[len(kept):])
		s.heap = kept
		for j := range s.heap {
			s.at[s.heap[j].k] = int32(j)
		}
		for j := len(s.heap)/2 - 1; j >= 0; j-- {
			s.down(j)
		}
		s.mu.Unlock()
	}
}

// Stats are a Table table's size and counters.
type Stats struct {
	// Len is the number of memos held (expired ones until Sweep).
	Len int
	// Max is the cap.
	Max int
	// Evicted counts memos forgotten before their time to make room.
	Evicted uint64
	// Refused counts new memos dropped because the table was full and
	// they would have expired first.
	Refused uint64
}

// Stats returns the table's size and counters.
func (m *Table) Stats() Stats {
	var st Stats
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		st.Len += len(s.heap)
		st.Max += s.max
		st.Evicted += s.evicted
		st.Refused += s.refused
		s.mu.Unlock()
	}
	return st
}
