package crdt

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleBlocks(rng *rand.Rand, n int) []Block {
	rules := []string{"login", "otp"}
	out := make([]Block, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, Block{
			Rule:  rules[rng.IntN(len(rules))],
			Key:   "user-" + strconv.Itoa(rng.IntN(1000)),
			Until: 1_700_000_000_000_000_000 + rng.Int64N(1e12),
		})
	}
	return out
}

// sameBlocks compares blocks ignoring order (Encode groups by rule).
func sameBlocks(t *testing.T, want, got []Block) { t.Helper(); sameMultiset(t, want, got) }

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

func TestDeltaBlocksRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tests := []struct {
		name              string
		entries, blocks   int
		maxBytes          int
		wantV2, wantV3min int
	}{
		{"blocks only", 0, 3, 0, 0, 1},
		{"entries and blocks, one message", 5, 3, 0, 1, 1},
		{"split under max bytes", 50, 400, 2048, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sampleDelta(rng, tt.entries)
			d.Blocks = sampleBlocks(rng, tt.blocks)
			msgs, err := Encode(d, tt.maxBytes)
			require.NoError(t, err)
			var back Delta
			v2, v3 := 0, 0
			for _, m := range msgs {
				if tt.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tt.maxBytes)
				}
				part, err := Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				assert.Equal(t, d.Epoch, part.Epoch)
				if len(part.Blocks) > 0 {
					v3++
				}
				if len(part.Entries) > 0 {
					v2++
				}
				back.Entries = append(back.Entries, part.Entries...)
				back.Blocks = append(back.Blocks, part.Blocks...)
			}
			assert.Equal(t, tt.wantV2, v2)
			assert.GreaterOrEqual(t, v3, tt.wantV3min)
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, d.Blocks, back.Blocks)
		})
	}
}

// TestDeltaBlocksOneEnvelope: counts and blocks travel as two sections of
// one envelope.
func TestDeltaBlocksOneEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	d := sampleDelta(rng, 4)
	d.Blocks = sampleBlocks(rng, 2)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []SectionKind{SectionCounts, SectionBlocks}, sectionKinds(t, msgs[0]))
}

func TestDecodeHostileBlocks(t *testing.T) {
	sender := []any{"eu", "ams", "n1", 1}
	tests := []struct {
		name   string
		blocks any
	}{
		{"odd elements", []any{[]any{"login", []any{"k", 5, "j"}}}},
		{"empty key", []any{[]any{"login", []any{"", 5}}}},
		{"empty rule", []any{[]any{"", []any{"k", 5}}}},
		{"long key", []any{[]any{"login", []any{string(make([]byte, MaxKeyLen+1)), 5}}}},
		{"time as string", []any{[]any{"login", []any{"k", "5"}}}},
		{"group of three", []any{[]any{"login", []any{"k", 5}, 1}}},
		{"not an array", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Delta{Blocks: []Block{{Rule: "x", Key: "y", Until: 1}}}
			err := NewDecoder().Decode(mp(t, []any{3, sender, 5, 1, []any{}, tt.blocks}), &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrDeltaMalformed), "%v", err)
			assert.Empty(t, out.Blocks)
		})
	}
	// A huge length prefix is refused before anything is allocated.
	b := unhex("96 03 94 a26575 a3616d73 a26e31 01 05 01 90 91 92 a56c6f67696e dd 7fffffff")
	_, err := Decode(b)
	assert.ErrorIs(t, err, ErrDeltaMalformed)
}

// blockModel is the reference: a plain map merged by max, no cap.
type blockModel map[blockKey]int64

func (m blockModel) raise(r RuleID, k string, until int64) {
	if until > m[blockKey{r, k}] {
		m[blockKey{r, k}] = until
	}
}

func snapshot(b *Blocks) blockModel {
	out := blockModel{}
	b.Each(-1<<63, func(r RuleID, k string, until int64) { out[blockKey{r, k}] = until })
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
			model.raise(RuleID(o.Rule[0]-'0'), o.Key, o.Until)
		}
		apply := func(b *Blocks, ops []Block) {
			for _, o := range ops {
				r, k := RuleID(o.Rule[0]-'0'), o.Key
				before := b.Until(r, k)
				b.Raise(r, k, o.Until, false)
				if after := b.Until(r, k); after < before || after != MergeBlock(before, o.Until) {
					t.Fatalf("seed %d: raise %+v: %d -> %d", seed, o, before, after)
				}
			}
		}
		inOrder := NewBlocks(1000)
		apply(inOrder, ops)
		shuffled := append([]Block(nil), ops...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		twice := NewBlocks(1000)
		apply(twice, shuffled)
		apply(twice, ops) // idempotent: everything again
		// Associative: merge two halves separately, then one into the other.
		a, b := NewBlocks(1000), NewBlocks(1000)
		apply(a, ops[:len(ops)/2])
		apply(b, ops[len(ops)/2:])
		b.Each(0, func(r RuleID, k string, until int64) { a.Raise(r, k, until, false) })
		for name, got := range map[string]*Blocks{"in order": inOrder, "shuffled twice": twice, "halves": a} {
			if !assert.Equal(t, model, snapshot(got), "seed %d: %s", seed, name) {
				return
			}
		}
	}
}

func TestBlocksCapSweepDrain(t *testing.T) {
	b := NewBlocks(2)
	assert.Equal(t, BlockRaised, b.Raise(1, "a", 100, true))
	assert.Equal(t, BlockRaised, b.Raise(1, "b", 200, false))
	assert.Equal(t, BlockFull, b.Raise(1, "c", 300, true), "no room for a third")
	assert.Equal(t, BlockUnchanged, b.Raise(1, "a", 50, true), "a block never shrinks")
	assert.Equal(t, BlockRaised, b.Raise(1, "b", 250, false), "a held block may grow when full")
	assert.Equal(t, uint64(1), b.Full())
	assert.Zero(t, b.Until(1, "c"))
	assert.Zero(t, b.Until(2, "a"), "blocks are per rule")

	var drained []Block
	drain := func() {
		drained = drained[:0]
		b.Drain(func(r RuleID, k string, until int64) { drained = append(drained, Block{Key: k, Until: until}) })
	}
	drain()
	assert.Equal(t, []Block{{Key: "a", Until: 100}}, drained, "only marked raises")
	drain()
	assert.Empty(t, drained, "marks are cleared")

	assert.Equal(t, 1, b.Sweep(100), "a block ending at now is over")
	assert.Equal(t, 1, b.Len())
	assert.Equal(t, BlockRaised, b.Raise(1, "c", 300, true), "room again")
	b.DropRule(1)
	assert.Zero(t, b.Len())
	drain()
	assert.Empty(t, drained, "dropped blocks are not sent")
	assert.Equal(t, BlockUnchanged, b.Raise(1, "z", 0, true), "no block")
}

func TestBlocksUntilDoesNotAllocate(t *testing.T) {
	b := NewBlocks(0)
	b.Raise(1, "203.0.113.7", 100, false)
	key := "203.0.113.7"
	allocs := testing.AllocsPerRun(100, func() { _ = b.Until(1, key) })
	assert.Zero(t, allocs)
}

// Raise keeps a copy of the key, also when it raises a block it holds: the
// caller's key may be a view of a buffer it reuses.
func TestBlocksRaiseKeepsNoViewOfTheCallersKey(t *testing.T) {
	b := NewBlocks(0)
	buf := []byte("203.0.113.7")
	key := unsafe.String(&buf[0], len(buf))
	require.Equal(t, BlockRaised, b.Raise(1, key, 100, true))
	require.Equal(t, BlockRaised, b.Raise(1, key, 200, true), "a later end raises the block held")
	copy(buf, "XXXXXXXXXXX") // the caller reuses its buffer
	assert.EqualValues(t, 200, b.Until(1, "203.0.113.7"))
	var drained []string
	b.Drain(func(_ RuleID, k string, _ int64) { drained = append(drained, k) })
	assert.Equal(t, []string{"203.0.113.7"}, drained)
}
