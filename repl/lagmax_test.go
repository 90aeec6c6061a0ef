package repl

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLagMaxMatchesAWalk sets random slots of trees of several sizes to
// random latencies or to "does not count", and checks after every change that the tree's largest
// latency is what a walk over the slots finds.
func TestLagMaxMatchesAWalk(t *testing.T) {
	for _, slots := range []int{0, 1, 2, 3, 7, 64, 1000} {
		seed := uint64(slots + 1)
		rng := rand.New(rand.NewPCG(seed, 7))
		var tr lagMax
		tr.reset(slots)
		ref := make([]int64, max(slots, 1))
		for i := range ref {
			ref[i] = -1
		}
		if slots > 0 {
			for i := range slots / 2 {
				ref[i] = int64(rng.IntN(5))
				tr.put(int32(i), ref[i])
			}
		}
		tr.build()
		for step := range 2000 {
			wantFar := int64(0)
			for _, v := range ref {
				wantFar = max(wantFar, v)
			}
			require.Equal(t, wantFar, tr.max(), "seed %d slots %d step %d", seed, slots, step)
			s := int32(rng.IntN(len(ref)))
			v := int64(rng.IntN(6)) - 1
			ref[s] = v
			tr.set(s, v)
			assert.Equal(t, v, tr.get(s))
		}
		assert.True(t, tr.has(int32(slots-1)) || slots == 0)
	}
}
