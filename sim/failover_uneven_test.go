package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// unevenFailoverScenario draws a failover as failoverScenario does (two or
// three regions of one to three PoPs of one to three nodes, one region cut
// off from 20 s to 60 s, its clients moving to one PoP of the other side
// or spread over it, at the cut or up to 15 s into it), with each PoP's
// demand weighted 0.3, 1 or 3 at random: demand and nodes spread unevenly,
// and over the limit each replica admits its part of the headroom, not of
// the demand.
func unevenFailoverScenario(rng *rand.Rand, i int) (string, string) {
	width, cutAt := 10, 20
	nreg := 2 + rng.IntN(2)
	regions := drawRegions(rng, nreg, 3)
	cut := rng.IntN(nreg)
	var all, other []string
	weight := map[string]float64{}
	var tot, otot float64
	for r, ps := range regions {
		for _, p := range ps {
			all = append(all, p.name)
			weight[p.name] = []float64{0.3, 1, 3}[rng.IntN(3)]
			tot += weight[p.name]
			if r != cut {
				other = append(other, p.name)
				otot += weight[p.name]
			}
		}
	}
	limit := []int{500, 1000}[rng.IntN(2)]
	keys := []int{10, 30, 100}[rng.IntN(3)]
	mult := []float64{1.5, 2, 3}[rng.IntN(3)]
	at := []int{20, 23, 25, 28, 32, 35}[rng.IntN(6)]
	lat := []int{40, 90, 150}[rng.IntN(3)]
	loss := []float64{0, 0.005, 0.01}[rng.IntN(3)]
	share := make([]string, len(all))
	for j, p := range all {
		share[j] = fmt.Sprintf("%s: %.6f", p, weight[p]/tot)
	}
	to := "spread"
	if rng.IntN(2) == 0 {
		to = other[rng.IntN(len(other))]
	}
	cutPart := (tot - otot) / tot
	moved := make([]string, len(other))
	for j, p := range other {
		v := weight[p] / otot // spread as the side's own demand is
		if to != "spread" {
			v = weight[p] / tot
			if p == to {
				v += cutPart
			}
		}
		moved[j] = fmt.Sprintf("%s: %.6f", p, v)
	}
	var b strings.Builder
	writeFailoverScenario(&b, fmt.Sprintf("uneven-failover-%d", i), rng.IntN(1000), regions, lat, loss,
		limit, width, keys, mult, share, moved, at, cut, cutAt)
	return b.String(), fmt.Sprintf("%d regions, r%d cut (%.2f of the demand), %d keys at %gx a limit of %d, moving at %ds to %s, %dms, loss %g",
		nreg, cut, cutPart, keys, mult, limit, at, to, lat, loss)
}

// Failovers on fleets of uneven demand (unevenFailoverScenario). A side's
// part of the fleet's demand before the cut was read from its part of the
// admits, which over the limit follow the replicas: a PoP of three nodes
// asked for two thirds of the requests admitted a third, and a failover of
// the other third onto it read as a side at half of the fleet's demand
// (0.47 of the central limiter's admits in the cut); 8 of these 24 runs
// were under 0.80. Every node now replicates what it refused (pop's
// refused windows): the side's part counts it, 0.78 of central at the
// least (a failover of three tenths of the demand moving 5 s into the
// cut's window, whose growth sits in the band a rise on both sides shows
// too: pop's riseRoom).
func TestUnevenDemandFailoversAcrossTheClass(t *testing.T) {
	runDrawnFleets(t, 61, unevenFailoverScenario, failoverCheck(t, 0.75))
}
