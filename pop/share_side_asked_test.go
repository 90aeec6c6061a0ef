package pop

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failover onto one PoP of a side of two: 30 keys at 1.5 times their
// limit (20 a window), eu/ams asking 10 a window, us/iad 5 and us/sfo 15;
// at the cut eu's clients move to iad, sfo's demand stays. iad's own
// demand triples, more than a failover brings its side (taken for the
// side's growth: a surge), and sfo's does not move: each kept its part of
// the limit, and the side admitted 332 of the keys' 600 a window, iad's
// demand alone. What the side's replicas were asked, replicated between
// its PoPs, says the side grew 1.5 times, all of the fleet's demand: both
// nodes take it for their own, and the side takes the keys' limits (510
// and 540 of 600 from the cut's third window).
func TestShareFailoverOntoOnePoPOfTheSide(t *testing.T) {
	const keys = 30
	r := sideRule()
	mk := func(region, pop, node string) *Node {
		n, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: region, PoP: pop}, Node: node, Incarnation: 1}, Rules: []Rule{r}})
		require.NoError(t, err)
		n.Link().SetEpoch(1)
		n.Link().SetAllowance(ScopeGlobal, Allowance{Horizon: time.Millisecond, Members: 1, PoPs: 3})
		return n
	}
	eu, iad, sfo := mk("eu", "ams", "a"), mk("us", "iad", "b"), mk("us", "sfo", "c")
	sync := func(now int64, ns ...*Node) {
		for _, from := range ns {
			out := from.Link().Flush(now, nil)
			for _, to := range ns {
				if to != from {
					to.Link().Apply(now, &out.PoP, ScopeGlobal)
				}
			}
		}
	}
	ks := manyKeys(keys)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	const pre, cut = 2, 5
	var usAdm, all [cut][keys]int
	for w := int64(-pre); w < cut; w++ {
		for i := 0; i < 40; i++ {
			at := start + (w+pre)*W + int64(i)*W/40
			if w == 0 && i == 0 {
				eu.Link().SetUnheard(at, []string{"us/iad", "us/sfo"})
				iad.Link().SetUnheard(at, []string{"eu/ams"})
				sfo.Link().SetUnheard(at, []string{"eu/ams"})
			}
			for ki, k := range ks {
				now := at + int64(ki)
				// eu 10 a window, iad 5, sfo 15 before the cut; iad 15
				// after it.
				demand := map[*Node]int{eu: b2i(i%4 == 0), iad: b2i(i%8 == 1), sfo: b2i(i%8 == 2 || i%8 == 3 || i%8 == 5)}
				if w >= 0 {
					demand[eu], demand[iad] = 0, b2i(i%8 == 0 || i%8 == 1 || i%8 == 4)
				}
				for n, c := range demand {
					for range c {
						if d, _ := n.Decide(now, "api", k, 1); d.Allowed && w >= 0 {
							all[w][ki]++
							if n != eu {
								usAdm[w][ki]++
							}
						}
					}
				}
			}
			now := at + int64(keys)
			if w < 0 {
				sync(now, eu, iad, sfo)
			} else {
				sync(now, iad, sfo)
				eu.Link().Flush(now, nil)
			}
		}
	}
	for w := range cut {
		n := 0
		for k := range keys {
			n += usAdm[w][k]
			assert.LessOrEqual(t, all[w][k], 22, "window %d key %d: the fleet stays at the limit", w, k)
		}
		t.Logf("window %d: us admitted %d of %d keys' limits (%d)", w, n, keys, keys*20)
		if w >= 2 {
			assert.GreaterOrEqual(t, n, keys*16, "window %d: us takes each key's limit", w)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
