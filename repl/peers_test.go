package repl

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPeerTableFollowsMap drives a peer table, with a cache much smaller
// than the PoPs it tracks (so IDs collide), through random adds, look-ups
// and deletions beside a plain map: every look-up answers as the map does.
func TestPeerTableFollowsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newPeerTable()
	model := map[PoPID]*peer{}
	id := func() PoPID {
		return PoPID{Region: fmt.Sprintf("r%d", rng.IntN(4)), PoP: fmt.Sprintf("p%d", rng.IntN(100))}
	}
	for step := range 20000 {
		k := id()
		switch rng.IntN(4) {
		case 0:
			if model[k] == nil {
				p := &peer{}
				tab.add(k, p)
				model[k] = p
			}
		case 1:
			tab.del(k)
			delete(model, k)
		default:
			if got := tab.get(k); got != model[k] {
				t.Fatalf("step %d: get(%v) = %p, want %p", step, k, got, model[k])
			}
		}
		require.Len(t, tab.m, len(model))
		require.GreaterOrEqual(t, len(tab.cache), 2*len(tab.m))
	}
	require.Greater(t, len(tab.m), minCache, "IDs collide in the cache")
}
