package crdt

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleMemos(rng *rand.Rand, n int) []Memo {
	rules := []string{"pay", "api"}
	out := make([]Memo, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, Memo{
			Rule:    rules[rng.IntN(len(rules))],
			ID:      MemoIDOf("k"+strconv.Itoa(rng.IntN(100)), "idem-"+strconv.Itoa(rng.IntN(1000)), 1, ""),
			Until:   1_700_000_000_000_000_000 + rng.Int64N(1e12),
			Verdict: Verdict(rng.IntN(4)),
		})
	}
	return out
}

// sameMemos compares memos ignoring order (Encode groups by rule).
func sameMemos(t *testing.T, want, got []Memo) { t.Helper(); sameMultiset(t, want, got) }

func TestMemoIDOf(t *testing.T) {
	assert.Equal(t, MemoIDOf("k", "i", 1, ""), MemoIDOf("k", "i", 1, ""), "deterministic: every node derives the same ID")
	assert.NotEqual(t, MemoIDOf("ab", "c", 1, ""), MemoIDOf("a", "bc", 1, ""), "length-prefixed: the split between key and idempotency key counts")
	assert.NotEqual(t, MemoIDOf("k", "i", 1, ""), MemoIDOf("i", "k", 1, ""))
	assert.NotEqual(t, MemoIDOf("k", "i", 1, ""), MemoIDOf("k", "i", 3, ""), "a larger cost is another request")
	assert.NotEqual(t, MemoIDOf("k", "i", 1, ""), MemoIDOf("k", "i", 1, "pro"), "so is another tier")
	long := string(make([]byte, 3*MaxKeyLen))
	assert.NotEqual(t, MemoIDOf(long, "a", 1, ""), MemoIDOf(long, "b", 1, ""), "oversized input is hashed whole")
	key, idem := "203.0.113.7", "7c1f4a2e-5d7b-4f0e-9b1a-2f8e6c3d9a10"
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = MemoIDOf(key, idem, 1, "") }))
}

func TestDeltaMemosRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	tests := []struct {
		name                   string
		entries, blocks, memos int
		maxBytes               int
		wantMsgs               int // 0: more than one
	}{
		{"memos only", 0, 0, 3, 0, 1},
		{"entries, blocks and memos in one message", 5, 2, 3, 0, 1},
		{"split under max bytes", 20, 0, 400, 2048, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sampleDelta(rng, tt.entries)
			d.Blocks = sampleBlocks(rng, tt.blocks)
			d.Memos = sampleMemos(rng, tt.memos)
			msgs, err := Encode(d, tt.maxBytes)
			require.NoError(t, err)
			var back Delta
			if tt.wantMsgs > 0 {
				assert.Len(t, msgs, tt.wantMsgs)
			} else {
				assert.Greater(t, len(msgs), 1)
			}
			for _, m := range msgs {
				if tt.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tt.maxBytes)
				}
				part, err := Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				back.Entries = append(back.Entries, part.Entries...)
				back.Blocks = append(back.Blocks, part.Blocks...)
				back.Memos = append(back.Memos, part.Memos...)
			}
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, d.Blocks, back.Blocks)
			sameMemos(t, d.Memos, back.Memos)
		})
	}
}

// TestDeltaMemosOneEnvelope: counts and memos travel as two sections of
// one envelope.
func TestDeltaMemosOneEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	d := sampleDelta(rng, 2)
	d.Memos = sampleMemos(rng, 2)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []SectionKind{SectionCounts, SectionMemos}, sectionKinds(t, msgs[0]))
}

func TestDecodeHostileMemos(t *testing.T) {
	sender := []any{"eu", "ams", "n1", 1}
	id := make([]byte, 16)
	tests := []struct {
		name  string
		memos any
	}{
		{"not a multiple of three", []any{[]any{"pay", []any{id, 5}}}},
		{"short id", []any{[]any{"pay", []any{id[:15], 5, 1}}}},
		{"long id", []any{[]any{"pay", []any{append(id, 0), 5, 1}}}},
		{"empty rule", []any{[]any{"", []any{id, 5, 1}}}},
		{"unknown verdict bits", []any{[]any{"pay", []any{id, 5, 4}}}},
		{"negative verdict", []any{[]any{"pay", []any{id, 5, -1}}}},
		{"time as string", []any{[]any{"pay", []any{id, "5", 1}}}},
		{"group of three", []any{[]any{"pay", []any{id, 5, 1}, 1}}},
		{"not an array", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Delta{Memos: []Memo{{Rule: "x", Until: 1}}}
			err := NewDecoder().Decode(mp(t, []any{4, sender, 5, 1, []any{}, []any{}, tt.memos}), &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrDeltaMalformed), "%v", err)
			assert.Empty(t, out.Memos)
		})
	}
	t.Run("wrong arity for version 4", func(t *testing.T) {
		_, err := Decode(mp(t, []any{4, sender, 5, 1, []any{}, []any{}}))
		assert.ErrorIs(t, err, ErrDeltaMalformed)
	})
	t.Run("version 8", func(t *testing.T) {
		_, err := Decode(mp(t, []any{8, sender, 5, 1, []any{}, []any{}, []any{}, []any{}, []any{}}))
		assert.ErrorIs(t, err, ErrDeltaVersion)
	})
	// A huge length prefix is refused before anything is allocated.
	b := unhex("97 04 94 a26575 a3616d73 a26e31 01 05 01 90 90 91 92 a3706179 dd 7fffffff")
	_, err := Decode(b)
	assert.ErrorIs(t, err, ErrDeltaMalformed)
}

// memoModel is the reference: a plain map merged by MergeMemo, no cap.
type memoModel map[memoKey][2]int64

func (m memoModel) put(k memoKey, until int64, v Verdict) {
	old := m[k]
	u, nv := MergeMemo(old[0], Verdict(old[1]), until, v)
	m[k] = [2]int64{u, int64(nv)}
}

func memoSnapshot(m *Memos) memoModel {
	out := memoModel{}
	m.Each(-1<<63, func(r RuleID, id MemoID, until int64, v Verdict) { out[memoKey{r, id}] = [2]int64{until, int64(v)} })
	return out
}

// TestMemosMergeLaws checks, over seeded random memo sets, that merging
// memos in any order, any grouping and any number of times gives the
// reference model's state (commutative, associative, idempotent), and that
// a memo held only ever moves to an earlier decision (monotone).
func TestMemosMergeLaws(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 77))
		var ops []Memo
		for i := 0; i < 40; i++ {
			ops = append(ops, Memo{Rule: strconv.Itoa(rng.IntN(3)), ID: MemoIDOf("k", strconv.Itoa(rng.IntN(6)), 1, ""),
				Until: 1 + rng.Int64N(10), Verdict: Verdict(rng.IntN(4))})
		}
		key := func(o Memo) memoKey { return memoKey{RuleID(o.Rule[0] - '0'), o.ID} }
		model := memoModel{}
		for _, o := range ops {
			model.put(key(o), o.Until, o.Verdict)
		}
		apply := func(m *Memos, ops []Memo) {
			for _, o := range ops {
				before := memoSnapshot(m)[key(o)]
				m.Put(0, key(o).rule, o.ID, o.Until, o.Verdict, false)
				after := memoSnapshot(m)[key(o)]
				if before[0] != 0 && after[0] > before[0] {
					t.Fatalf("seed %d: put %+v: until %d -> %d", seed, o, before[0], after[0])
				}
			}
		}
		inOrder := NewMemos(1000)
		apply(inOrder, ops)
		shuffled := append([]Memo(nil), ops...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		twice := NewMemos(1000)
		apply(twice, shuffled)
		apply(twice, ops)
		a, b := NewMemos(1000), NewMemos(1000)
		apply(a, ops[:len(ops)/2])
		apply(b, ops[len(ops)/2:])
		b.Each(0, func(r RuleID, id MemoID, until int64, v Verdict) { a.Put(0, r, id, until, v, false) })
		for name, got := range map[string]*Memos{"in order": inOrder, "shuffled twice": twice, "halves": a} {
			if !assert.Equal(t, model, memoSnapshot(got), "seed %d: %s", seed, name) {
				return
			}
		}
	}
}

func TestMemosExpiryDrainDrop(t *testing.T) {
	m := NewMemos(100)
	a, b := MemoIDOf("k", "a", 1, ""), MemoIDOf("k", "b", 1, "")
	assert.Equal(t, MemoMerged, m.Put(0, 1, a, 100, VerdictAllowed, true))
	assert.Equal(t, MemoMerged, m.Put(0, 1, b, 200, 0, false))
	v, ok := m.Get(1, a, 99)
	assert.True(t, ok)
	assert.Equal(t, VerdictAllowed, v)
	_, ok = m.Get(1, a, 100)
	assert.False(t, ok, "remembered until 100: forgotten at 100")
	_, ok = m.Get(2, a, 0)
	assert.False(t, ok, "memos are per rule")
	assert.Equal(t, MemoUnchanged, m.Put(0, 1, a, 150, 0, true), "the first decision stands")
	assert.Equal(t, MemoUnchanged, m.Put(100, 1, a, 100, 0, true), "already over")
	assert.Equal(t, MemoMerged, m.Put(120, 1, a, 300, 0, true), "an expired memo is replaced by a new decision")
	v, _ = m.Get(1, a, 120)
	assert.Equal(t, Verdict(0), v)

	var drained []Memo
	m.Drain(func(r RuleID, id MemoID, until int64, v Verdict) {
		drained = append(drained, Memo{ID: id, Until: until, Verdict: v})
	})
	assert.Equal(t, []Memo{{ID: a, Until: 300}}, drained, "only marked puts, once each, as they stand")
	drained = drained[:0]
	m.Drain(func(r RuleID, id MemoID, until int64, v Verdict) { drained = append(drained, Memo{ID: id}) })
	assert.Empty(t, drained, "marks are cleared")

	assert.Equal(t, 1, m.Sweep(200), "b ends at 200")
	assert.Equal(t, 1, m.Stats().Len)
	m.DropRule(1)
	assert.Zero(t, m.Stats().Len)
	assert.Equal(t, MemoUnchanged, m.Put(0, 1, a, 0, VerdictAllowed, true), "no memo")
}

// TestMemosBoundEvictsOldestExpiring: a full table forgets the memo that
// expires first, or drops a new one that would, and never holds more than
// its cap.
func TestMemosBoundEvictsOldestExpiring(t *testing.T) {
	for _, max := range []int{1, 5, 16, 100, 1000} {
		t.Run(strconv.Itoa(max), func(t *testing.T) {
			m := NewMemos(max)
			assert.Equal(t, max, m.Stats().Max)
			rng := rand.New(rand.NewPCG(uint64(max), 1))
			for i := 0; i < 5*max+50; i++ {
				m.Put(0, 1, MemoIDOf("k", strconv.Itoa(i), 1, ""), 1+rng.Int64N(1e6), VerdictAllowed, true)
				require.LessOrEqual(t, m.Stats().Len, max)
			}
			st := m.Stats()
			assert.Equal(t, max, st.Len)
			assert.NotZero(t, st.Evicted+st.Refused)
			// Each shard holds its latest-expiring memos: a memo expiring
			// before its shard's earliest would be refused.
			for i := range m.shards {
				s := &m.shards[i]
				for j := range s.heap {
					require.GreaterOrEqual(t, s.heap[j].until, s.heap[0].until, "heap order")
					require.Equal(t, int32(j), s.at[s.heap[j].k])
				}
				assert.Len(t, s.at, len(s.heap))
				assert.LessOrEqual(t, len(s.dirty), 2*s.max+16)
			}
		})
	}
	m := NewMemos(1)
	m.Put(0, 1, MemoIDOf("k", "late", 1, ""), 100, 0, false)
	assert.Equal(t, MemoRefused, m.Put(0, 1, MemoIDOf("k", "early", 1, ""), 50, 0, false), "would expire first")
	assert.Equal(t, MemoMerged, m.Put(0, 1, MemoIDOf("k", "later", 1, ""), 150, 0, false))
	_, ok := m.Get(1, MemoIDOf("k", "late", 1, ""), 0)
	assert.False(t, ok, "the memo expiring first was forgotten")
	assert.Equal(t, MemoStats{Len: 1, Max: 1, Evicted: 1, Refused: 1}, m.Stats())
}

// TestMemosMemoryBound measures what a full table costs per memo, the
// figure MemoBytesPerEntry states.
func TestMemosMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const n = 1 << 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := NewMemos(n)
	for i := 0; i < 3*n; i++ {
		m.Put(0, 1, MemoIDOf("k", strconv.Itoa(i), 1, ""), int64(1+i), VerdictAllowed, true)
	}
	m.Drain(func(RuleID, MemoID, int64, Verdict) {})
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per memo", per)
	assert.LessOrEqual(t, per, float64(MemoBytesPerEntry))
	runtime.KeepAlive(m)
}

func TestMemosGetDoesNotAllocate(t *testing.T) {
	m := NewMemos(0)
	id := MemoIDOf("k", "i", 1, "")
	m.Put(0, 1, id, 100, VerdictAllowed, false)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = m.Get(1, id, 0) }))
}
