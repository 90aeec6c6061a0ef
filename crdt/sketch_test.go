package crdt

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSketchNeverUnderestimates drives a sketch with seeded random raises
// and adds over a few windows against an exact reference: every key's
// estimate stays at or above its counts, also after narrowing.
func TestSketchNeverUnderestimates(t *testing.T) {
	rng := seeded(t, 5)
	k := newSketch(64, math.MaxUint64) // no noise cap: every estimate is a bound
	type counts struct {
		win int64
		c   [2]uint64
	}
	truth := map[uint64]*counts{}
	at := func(c *counts, w int64) [2]uint64 {
		switch w - c.win {
		case 0:
			return c.c
		case 1:
			return [2]uint64{c.c[1], 0}
		}
		return [2]uint64{}
	}
	win := int64(10)
	for step := range 20000 {
		if rng.IntN(2000) == 0 {
			win++
		}
		if step == 10000 {
			k.narrow(16)
		}
		h := rng.Uint64N(500) * 0x9e3779b97f4a7c15
		c, ok := truth[h]
		if !ok {
			c = &counts{win: win}
			truth[h] = c
		}
		cur := at(c, win)
		if rng.IntN(2) == 0 {
			cost := 1 + rng.Uint64N(5)
			k.add(h, win, [2]uint64{0, cost})
			cur[1] += cost
		} else {
			// An evicted key held at least its estimate and spent more.
			est := k.estimate(h, win)
			cur = [2]uint64{max(cur[0], est[0]), max(cur[1], est[1]) + rng.Uint64N(3)}
			k.raise(h, win, cur)
		}
		*c = counts{win: win, c: cur}
		est := k.estimate(h, win)
		require.GreaterOrEqual(t, est[0], cur[0], "step %d", step)
		require.GreaterOrEqual(t, est[1], cur[1], "step %d", step)
	}
	for h, c := range truth {
		est, cur := k.estimate(h, win), at(c, win)
		assert.GreaterOrEqual(t, est[0], cur[0])
		assert.GreaterOrEqual(t, est[1], cur[1])
	}
}

// TestSketchOwnAndNoise: a key evicted and back starts from its own
// cells' counts in full; a key new to the sketch starts from other keys'
// counts only up to the noise cap, however many keys have raised them.
func TestSketchOwnAndNoise(t *testing.T) {
	rng := seeded(t, 9)
	const win = 100
	k := newSketch(8, noiseCap(6)) // limit 10: protection threshold 6, cap 4
	assert.EqualValues(t, 4, k.noiseCap)
	held := rng.Uint64()
	k.raise(held, win, [2]uint64{0, 10}) // evicted at its limit
	assert.Equal(t, [2]uint64{0, 10}, k.estimate(held, win), "its own count, in full")

	// A flood of new keys, each starting from its estimate and spending one.
	for range 10_000 {
		h := rng.Uint64()
		k.raise(h, win, [2]uint64{0, k.estimate(h, win)[1] + 1})
	}
	for range 100 {
		e := k.estimate(rng.Uint64(), win)
		require.LessOrEqual(t, e[0]+e[1], uint64(4), "a new key starts at most from the cap")
	}
	e := k.estimate(held, win)
	assert.GreaterOrEqual(t, e[1], uint64(4), "the held key: its own cells, or the cap")

	// A cell another key raises in part is nobody's own.
	k = newSketch(8, 0)
	a := rng.Uint64()
	k.raise(a, win, [2]uint64{3, 0})
	assert.Equal(t, [2]uint64{3, 0}, k.estimate(a, win))
	for _, i := range k.cellsOf(a) {
		k.fps[i] = 0
	}
	assert.Equal(t, [2]uint64{0, 0}, k.estimate(a, win), "cap 0: nothing from others")
	assert.Equal(t, [2]uint64{2, 3}, capTotal([2]uint64{7, 3}, 5))
	assert.Equal(t, [2]uint64{0, 5}, capTotal([2]uint64{7, 9}, 5))
}

// TestSketchWithinMemoryBudget: a store of the default max keys under a
// byte budget (a node's limits.max_memory) floods with new keys until it
// evicts in every shard. The sketches of evicted keys, sized to the keys
// the budget can hold rather than to the max keys, keep the store's
// accounted bytes within the budget (at the default max keys, sized to
// the keys, the sketches alone took more than twice the budget).
func TestSketchWithinMemoryBudget(t *testing.T) {
	const budget = 8 << 20
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxBytes: budget})
	st.SetProtect(0, 11)
	for i := range 120_000 {
		st.Admit(0, "k"+strconv.Itoa(i), at(1), 1000, 1, true)
	}
	s := st.Stats()
	require.Greater(t, s.Evicted, uint64(0), "the flood filled the budget")
	t.Logf("keys %d, evicted %d, bytes %d (sketches %d, tables %d, arenas %d, remote entries %d) of %d",
		s.Keys, s.Evicted, s.Bytes(), s.SketchBytes, s.TableBytes, s.ArenaBytes, s.SideBytes, budget)
	assert.LessOrEqual(t, s.Bytes(), budget)
	assert.LessOrEqual(t, s.SketchBytes, budget/4, "the sketches take at most a quarter of the budget")
}
