package memos

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/wire/codec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoIDOf(t *testing.T) {
	assert.Equal(t, IDOf("k", "i", 1, ""), IDOf("k", "i", 1, ""), "deterministic: every node derives the same ID")
	assert.NotEqual(t, IDOf("ab", "c", 1, ""), IDOf("a", "bc", 1, ""), "length-prefixed: the split between key and idempotency key counts")
	assert.NotEqual(t, IDOf("k", "i", 1, ""), IDOf("i", "k", 1, ""))
	assert.NotEqual(t, IDOf("k", "i", 1, ""), IDOf("k", "i", 3, ""), "a larger cost is another request")
	assert.NotEqual(t, IDOf("k", "i", 1, ""), IDOf("k", "i", 1, "pro"), "so is another tier")
	long := string(make([]byte, 3*codec.MaxKeyLen))
	assert.NotEqual(t, IDOf(long, "a", 1, ""), IDOf(long, "b", 1, ""), "oversized input is hashed whole")
	key, idem := "203.0.113.7", "7c1f4a2e-5d7b-4f0e-9b1a-2f8e6c3d9a10"
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = IDOf(key, idem, 1, "") }))
}

// TestDeltaMemosOneEnvelope: counts and memos travel as two sections of
// one envelope.
// memoModel is the reference: a plain map merged by Merge, no cap.
type memoModel map[memoKey][2]int64

func (m memoModel) put(k memoKey, until int64, v Verdict) {
	old := m[k]
	u, nv := Merge(old[0], Verdict(old[1]), until, v)
	m[k] = [2]int64{u, int64(nv)}
}

func memoSnapshot(m *Table) memoModel {
	out := memoModel{}
	m.Each(-1<<63, func(r crdt.RuleID, id ID, until int64, v Verdict) { out[memoKey{r, id}] = [2]int64{until, int64(v)} })
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
			ops = append(ops, Memo{Rule: strconv.Itoa(rng.IntN(3)), ID: IDOf("k", strconv.Itoa(rng.IntN(6)), 1, ""),
				Until: 1 + rng.Int64N(10), Verdict: Verdict(rng.IntN(4))})
		}
		key := func(o Memo) memoKey { return memoKey{crdt.RuleID(o.Rule[0] - '0'), o.ID} }
		model := memoModel{}
		for _, o := range ops {
			model.put(key(o), o.Until, o.Verdict)
		}
		apply := func(m *Table, ops []Memo) {
			for _, o := range ops {
				before := memoSnapshot(m)[key(o)]
				m.Put(0, key(o).rule, o.ID, o.Until, o.Verdict, false)
				after := memoSnapshot(m)[key(o)]
				if before[0] != 0 && after[0] > before[0] {
					t.Fatalf("seed %d: put %+v: until %d -> %d", seed, o, before[0], after[0])
				}
			}
		}
		inOrder := NewTable(1000)
		apply(inOrder, ops)
		shuffled := append([]Memo(nil), ops...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		twice := NewTable(1000)
		apply(twice, shuffled)
		apply(twice, ops)
		a, b := NewTable(1000), NewTable(1000)
		apply(a, ops[:len(ops)/2])
		apply(b, ops[len(ops)/2:])
		b.Each(0, func(r crdt.RuleID, id ID, until int64, v Verdict) { a.Put(0, r, id, until, v, false) })
		for name, got := range map[string]*Table{"in order": inOrder, "shuffled twice": twice, "halves": a} {
			if !assert.Equal(t, model, memoSnapshot(got), "seed %d: %s", seed, name) {
				return
			}
		}
	}
}

func TestMemosExpiryDrainDrop(t *testing.T) {
	m := NewTable(100)
	a, b := IDOf("k", "a", 1, ""), IDOf("k", "b", 1, "")
	assert.Equal(t, Merged, m.Put(0, 1, a, 100, Allowed, true))
	assert.Equal(t, Merged, m.Put(0, 1, b, 200, 0, false))
	v, ok := m.Get(1, a, 99)
	assert.True(t, ok)
	assert.Equal(t, Allowed, v)
	_, ok = m.Get(1, a, 100)
	assert.False(t, ok, "remembered until 100: forgotten at 100")
	_, ok = m.Get(2, a, 0)
	assert.False(t, ok, "memos are per rule")
	assert.Equal(t, Unchanged, m.Put(0, 1, a, 150, 0, true), "the first decision stands")
	assert.Equal(t, Unchanged, m.Put(100, 1, a, 100, 0, true), "already over")
	assert.Equal(t, Merged, m.Put(120, 1, a, 300, 0, true), "an expired memo is replaced by a new decision")
	v, _ = m.Get(1, a, 120)
	assert.Equal(t, Verdict(0), v)

	var drained []Memo
	m.Drain(func(r crdt.RuleID, id ID, until int64, v Verdict) {
		drained = append(drained, Memo{ID: id, Until: until, Verdict: v})
	})
	assert.Equal(t, []Memo{{ID: a, Until: 300}}, drained, "only marked puts, once each, as they stand")
	drained = drained[:0]
	m.Drain(func(r crdt.RuleID, id ID, until int64, v Verdict) { drained = append(drained, Memo{ID: id}) })
	assert.Empty(t, drained, "marks are cleared")

	assert.Equal(t, 1, m.Sweep(200), "b ends at 200")
	assert.Equal(t, 1, m.Stats().Len)
	m.DropRule(1)
	assert.Zero(t, m.Stats().Len)
	assert.Equal(t, Unchanged, m.Put(0, 1, a, 0, Allowed, true), "no memo")
}

// TestMemosBoundEvictsOldestExpiring: a full table forgets the memo that
// expires first, or drops a new one that would, and never holds more than
// its cap.
func TestMemosBoundEvictsOldestExpiring(t *testing.T) {
	for _, max := range []int{1, 5, 16, 100, 1000} {
		t.Run(strconv.Itoa(max), func(t *testing.T) {
			m := NewTable(max)
			assert.Equal(t, max, m.Stats().Max)
			rng := rand.New(rand.NewPCG(uint64(max), 1))
			for i := 0; i < 5*max+50; i++ {
				m.Put(0, 1, IDOf("k", strconv.Itoa(i), 1, ""), 1+rng.Int64N(1e6), Allowed, true)
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
	m := NewTable(1)
	m.Put(0, 1, IDOf("k", "late", 1, ""), 100, 0, false)
	assert.Equal(t, Refused, m.Put(0, 1, IDOf("k", "early", 1, ""), 50, 0, false), "would expire first")
	assert.Equal(t, Merged, m.Put(0, 1, IDOf("k", "later", 1, ""), 150, 0, false))
	_, ok := m.Get(1, IDOf("k", "late", 1, ""), 0)
	assert.False(t, ok, "the memo expiring first was forgotten")
	assert.Equal(t, Stats{Len: 1, Max: 1, Evicted: 1, Refused: 1}, m.Stats())
}

// TestMemosMemoryBound measures what a full table costs per memo, the
// figure BytesPerEntry states.
func TestMemosMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const n = 1 << 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := NewTable(n)
	for i := 0; i < 3*n; i++ {
		m.Put(0, 1, IDOf("k", strconv.Itoa(i), 1, ""), int64(1+i), Allowed, true)
	}
	m.Drain(func(crdt.RuleID, ID, int64, Verdict) {})
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per memo", per)
	assert.LessOrEqual(t, per, float64(BytesPerEntry))
	runtime.KeepAlive(m)
}

func TestMemosGetDoesNotAllocate(t *testing.T) {
	m := NewTable(0)
	id := IDOf("k", "i", 1, "")
	m.Put(0, 1, id, 100, Allowed, false)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = m.Get(1, id, 0) }))
}
