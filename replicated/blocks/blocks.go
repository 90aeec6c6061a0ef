// Package blocks is the replicated state of the penalty box: a block per
// (rule, key) until a time, a max register; a bounded table of them; and
// their section of the wire format.
//
// Trust: any replica may send any block it holds (a block only ever
// denies); the receiver clamps a block's end to what the rule's block_for
// allows plus the clock skew it tolerates (package pop).
package blocks

import (
	"strings"
	"sync"

	"github.com/geolimit/geolimit/crdt"
)

// Block is one penalty block on the wire: Key is blocked under Rule until
// Until (Unix nanoseconds). A block is a max register: it only ever grows,
// and merging two is taking the later one, so blocks can be lost,
// duplicated and reordered like counts.
type Block struct {
	Rule  string
	Key   string
	Until int64
}

// Merge merges two block times of one (rule, key): the later one wins.
// It is commutative, associative and idempotent; 0 is its identity (no block).
func Merge(a, b int64) int64 { return max(a, b) }

// Outcome says what Table.Raise did.
type Outcome uint8

// Outcomes of Table.Raise.
const (
	// Raised: the block is new or now ends later.
	Raised Outcome = iota
	// Unchanged: the table already held a block ending as late or later.
	Unchanged
	// Full: the block is new and the table is at its cap; it was dropped.
	Full
)

// DefaultMax is the cap of a Table table made with max <= 0.
const DefaultMax = 1 << 16

type blockKey struct {
	rule crdt.RuleID
	key  string
}

type blockVal struct {
	until int64
	dirty bool // raised with mark since the last Drain
}

// Table is a bounded table of penalty blocks, one max register per (rule,
// key), kept beside the Store (a block outlives the key's windows). Raise
// grows a block, Until reads it, Drain hands over what this node raised
// since the last Drain, and Sweep drops blocks that ended. Memory is bounded
// by the cap given to NewTable: a new block that finds the table full is
// dropped (the key's counts still limit it).
//
// A Table is safe for concurrent use.
type Table struct {
	mu    sync.RWMutex
	m     map[blockKey]blockVal
	dirty []blockKey // keys marked dirty, in the order raised; may hold removed keys
	max   int
	full  uint64 // blocks dropped because the table was full
}

// NewTable returns an empty table holding at most max blocks
// (DefaultMax if max <= 0).
func NewTable(max int) *Table {
	if max <= 0 {
		max = DefaultMax
	}
	return &Table{m: map[blockKey]blockVal{}, max: max}
}

// Until returns when key's block under rule ends (Unix nanoseconds), 0 if it
// has none. It does not allocate.
func (b *Table) Until(rule crdt.RuleID, key string) int64 {
	b.mu.RLock()
	v := b.m[blockKey{rule, key}]
	b.mu.RUnlock()
	return v.until
}

// Raise merges a block of key under rule ending at until. With mark, a block
// that grows is handed to the next Drain (a block this node set; blocks
// learnt from peers are not re-sent by Drain). until <= 0 changes nothing.
func (b *Table) Raise(rule crdt.RuleID, key string, until int64, mark bool) Outcome {
	if until <= 0 {
		return Unchanged
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[blockKey{rule, key}]
	if ok && v.until >= until {
		return Unchanged
	}
	if !ok && len(b.m) >= b.max {
		b.full++
		return Full
	}
	// A copy of key, also for a key already held: assigning to a map entry
	// of a string key stores the key given, and the caller's may be a view
	// of a buffer it reuses. Raise is rare (a counted denial); a key that
	// does not escape saves every decision a copy.
	k := blockKey{rule, strings.Clone(key)}
	v.until = Merge(v.until, until)
	if mark && !v.dirty {
		v.dirty = true
		b.dirty = append(b.dirty, k)
	}
	b.m[k] = v
	return Raised
}

// Drain calls fn with every block raised with mark since the last Drain
// that is still held, in the order they were first raised, and clears the
// marks. fn must not call b's methods.
func (b *Table) Drain(fn func(rule crdt.RuleID, key string, until int64)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range b.dirty {
		v, ok := b.m[k]
		if !ok || !v.dirty {
			continue
		}
		v.dirty = false
		b.m[k] = v
		fn(k.rule, k.key, v.until)
	}
	clear(b.dirty)
	b.dirty = b.dirty[:0]
}

// Each calls fn with every block ending after now, in no particular order.
// fn must not call b's methods.
func (b *Table) Each(now int64, fn func(rule crdt.RuleID, key string, until int64)) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for k, v := range b.m {
		if v.until > now {
			fn(k.rule, k.key, v.until)
		}
	}
}

// Sweep drops the blocks that ended at or before now and returns how many.
func (b *Table) Sweep(now int64) int {
	return b.removeIf(func(k blockKey, v blockVal) bool { return v.until <= now })
}

// DropRule drops every block of rule.
func (b *Table) DropRule(rule crdt.RuleID) {
	b.removeIf(func(k blockKey, _ blockVal) bool { return k.rule == rule })
}

func (b *Table) removeIf(drop func(blockKey, blockVal) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, v := range b.m {
		if drop(k, v) {
			delete(b.m, k)
			n++
		}
	}
	if n > 0 {
		// Keep the pending list to keys still held, so it stays within the cap.
		kept := b.dirty[:0]
		for _, k := range b.dirty {
			if v, ok := b.m[k]; ok && v.dirty {
				kept = append(kept, k)
			}
		}
		clear(b.dirty[len(kept):])
		b.dirty = kept
	}
	return n
}

// Len returns the number of blocks held (ended ones included until Sweep).
func (b *Table) Len() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.m)
}

// Full returns how many new blocks were dropped because the table was full.
func (b *Table) Full() uint64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.full
}
