package blocks

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/geolimit/geolimit/crdt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sameMultiset checks that got holds the items of want, as many times
// each, in any order.
func sameMultiset[T comparable](t *testing.T, want, got []T) {
	t.Helper()
	count := map[T]int{}
	for _, x := range want {
		count[x]++
	}
	for _, x := range got {
		count[x]--
	}
	for x, c := range count {
		assert.Zero(t, c, "%+v", x)
	}
}

// TestDeltaBlocksOneEnvelope: counts and blocks travel as two sections of
// one envelope.
// blockModel is the reference: a plain map merged by max, no cap.
type blockModel map[blockKey]int64

func (m blockModel) raise(r crdt.RuleID, k string, until int64) {
	if until > m[blockKey{r, k}] {
		m[blockKey{r, k}] = until
	}
}

func snapshot(b *Table) blockModel {
	out := blockModel{}
	b.Each(-1<<63, func(r crdt.RuleID, k string, until int64) { out[blockKey{r, k}] = until })
	return out
}

// TestBlocksMaxRegisterLaws checks, over seeded random block sets, that
// merging blocks in any order, any grouping and any number of times gives
// the reference model's state (commutative, associative, idempotent), and
// that a block never shrinks (monotone).
func TestBlocksMaxRegisterLaws(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		var ops []Block
		for i := 0; i < 40; i++ {
			ops = append(ops, Block{Rule: strconv.Itoa(rng.IntN(3)), Key: "k" + strconv.Itoa(rng.IntN(6)), Until: 1 + rng.Int64N(100)})
		}
		model := blockModel{}
		for _, o := range ops {
			model.raise(crdt.RuleID(o.Rule[0]-'0'), o.Key, o.Until)
		}
		apply := func(b *Table, ops []Block) {
			for _, o := range ops {
				r, k := crdt.RuleID(o.Rule[0]-'0'), o.Key
				before := b.Until(r, k)
				b.Raise(r, k, o.Until, false)
				if after := b.Until(r, k); after < before || after != Merge(before, o.Until) {
					t.Fatalf("seed %d: raise %+v: %d -> %d", seed, o, before, after)
				}
			}
		}
		inOrder := NewTable(1000)
		apply(inOrder, ops)
		shuffled := append([]Block(nil), ops...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		twice := NewTable(1000)
		apply(twice, shuffled)
		apply(twice, ops) // idempotent: everything again
		// Associative: merge two halves separately, then one into the other.
		a, b := NewTable(1000), NewTable(1000)
		apply(a, ops[:len(ops)/2])
		apply(b, ops[len(ops)/2:])
		b.Each(0, func(r crdt.RuleID, k string, until int64) { a.Raise(r, k, until, false) })
		for name, got := range map[string]*Table{"in order": inOrder, "shuffled twice": twice, "halves": a} {
			if !assert.Equal(t, model, snapshot(got), "seed %d: %s", seed, name) {
				return
			}
		}
	}
}

func TestBlocksCapSweepDrain(t *testing.T) {
	b := NewTable(2)
	assert.Equal(t, Raised, b.Raise(1, "a", 100, true))
	assert.Equal(t, Raised, b.Raise(1, "b", 200, false))
	assert.Equal(t, Full, b.Raise(1, "c", 300, true), "no room for a third")
	assert.Equal(t, Unchanged, b.Raise(1, "a", 50, true), "a block never shrinks")
	assert.Equal(t, Raised, b.Raise(1, "b", 250, false), "a held block may grow when full")
	assert.Equal(t, uint64(1), b.Full())
	assert.Zero(t, b.Until(1, "c"))
	assert.Zero(t, b.Until(2, "a"), "blocks are per rule")

	var drained []Block
	drain := func() {
		drained = drained[:0]
		b.Drain(func(r crdt.RuleID, k string, until int64) { drained = append(drained, Block{Key: k, Until: until}) })
	}
	drain()
	assert.Equal(t, []Block{{Key: "a", Until: 100}}, drained, "only marked raises")
	drain()
	assert.Empty(t, drained, "marks are cleared")

	assert.Equal(t, 1, b.Sweep(100), "a block ending at now is over")
	assert.Equal(t, 1, b.Len())
	assert.Equal(t, Raised, b.Raise(1, "c", 300, true), "room again")
	b.DropRule(1)
	assert.Zero(t, b.Len())
	drain()
	assert.Empty(t, drained, "dropped blocks are not sent")
	assert.Equal(t, Unchanged, b.Raise(1, "z", 0, true), "no block")
}

func TestBlocksUntilDoesNotAllocate(t *testing.T) {
	b := NewTable(0)
	b.Raise(1, "203.0.113.7", 100, false)
	key := "203.0.113.7"
	allocs := testing.AllocsPerRun(100, func() { _ = b.Until(1, key) })
	assert.Zero(t, allocs)
}

// Raise keeps a copy of the key, also when it raises a block it holds: the
// caller's key may be a view of a buffer it reuses.
func TestBlocksRaiseKeepsNoViewOfTheCallersKey(t *testing.T) {
	b := NewTable(0)
	buf := []byte("203.0.113.7")
	key := unsafe.String(&buf[0], len(buf))
	require.Equal(t, Raised, b.Raise(1, key, 100, true))
	require.Equal(t, Raised, b.Raise(1, key, 200, true), "a later end raises the block held")
	copy(buf, "XXXXXXXXXXX") // the caller reuses its buffer
	assert.EqualValues(t, 200, b.Until(1, "203.0.113.7"))
	var drained []string
	b.Drain(func(_ crdt.RuleID, k string, _ int64) { drained = append(drained, k) })
	assert.Equal(t, []string{"203.0.113.7"}, drained)
}
