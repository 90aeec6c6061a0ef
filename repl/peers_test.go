package repl

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// TestPeerTableFollowsMap drives a peer table, with a cache much smaller
// than the PoPs it tracks (so IDs collide), through random adds, look-ups
// and deletions beside a plain map: every look-up answers as the map does.
func TestPeerTableFollowsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newPeerTable()
	model := map[identity.PoPID]*peer{}
	id := func() identity.PoPID {
		return identity.PoPID{Region: fmt.Sprintf("r%d", rng.IntN(4)), PoP: fmt.Sprintf("p%d", rng.IntN(100))}
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

// TestHeldAggregatesMatchFormer: for nodes holding random PoPs' aggregates
// of random epochs, with those PoPs' current epochs known or not, the
// relay's once-per-relay index answers every target, asked or not, as a
// walk over the held replicas with former does.
func TestHeldAggregatesMatchFormer(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	pops := []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}, {Region: "us", PoP: "sfo"}, {Region: "ap", PoP: "sin"}, {Region: "ap", PoP: "syd"}}
	seen := map[[2]bool]int{} // (asked, answer)
	for round := range 200 {
		n := testNode(t, ams1)
		c, _, now := speakingCore(t, n)
		for _, id := range pops[1:] {
			switch rng.IntN(3) {
			case 0: // unknown PoP
			case 1:
				c.peers.add(id, &peer{}) // known, epoch not yet
			default:
				c.peers.add(id, &peer{epoch: uint64(1 + rng.IntN(3))})
			}
		}
		for range rng.IntN(6) {
			id := pops[rng.IntN(len(pops))]
			d := wire.Delta{Sender: identity.PoPReplica(id, uint64(1+rng.IntN(3))),
				Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: now / int64(ruleWindow), Count: 1}}}
			n.Link().Apply(now, &d, pop.ScopeGlobal)
		}
		held := c.heldAggregates()
		for _, id := range pops[1:] {
			for _, asked := range []bool{false, true} {
				want := false
				for _, r := range n.Link().Replicas() {
					want = want || r.IsPoP() && c.former(r, id, asked)
				}
				if got := held.holdsFormer(c, id, asked); got != want {
					t.Fatalf("round %d: %v asked %v: %v, want %v (held %v)", round, id, asked, got, want, held.byPoP)
				}
				seen[[2]bool{asked, want}]++
			}
		}
	}
	require.Len(t, seen, 4, "every answer, asked and not: %v", seen)
	require.Greater(t, seen[[2]bool{true, true}], seen[[2]bool{false, true}], "an asking PoP is relayed other PoPs' former epochs too")
}
