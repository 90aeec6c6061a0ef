package crdt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSketchNeverUnderestimates drives a sketch with seeded random raises
// and adds over a few windows against an exact reference: every key's
// estimate stays at or above its counts, also after narrowing.
func TestSketchNeverUnderestimates(t *testing.T) {
	rng := seeded(t, 5)
	k := &sketch{mask: 63, cells: make([]aggregate, sketchRows*64)}
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
