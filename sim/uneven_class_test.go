package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// unevenScenario writes a fleet of PoPs of different sizes drawn from rng,
// with no fault: two or three regions of one PoP each, of one to three
// nodes (at least one of one node and one of three), 10 to 150 ms between
// regions, up to 1 % of those messages lost; 1 to 30 keys at 1.5 to 3
// times their limit of 500 or 1 000 per 10 s, their demand split evenly
// over the PoPs.
func unevenScenario(rng *rand.Rand, i int) (string, string) {
	n := 2 + rng.IntN(2)
	nodes := []int{1, 3, 1 + rng.IntN(3)}[:n]
	rng.Shuffle(n, func(a, b int) { nodes[a], nodes[b] = nodes[b], nodes[a] })
	limit := []int{500, 1000}[rng.IntN(2)]
	keys := []int{1, 10, 30}[rng.IntN(3)]
	mult := []float64{1.5, 2, 3}[rng.IntN(3)]
	lat := []int{10, 40, 90, 150}[rng.IntN(4)]
	loss := []float64{0, 0.005, 0.01}[rng.IntN(3)]
	var b strings.Builder
	fmt.Fprintf(&b, "name: uneven-class-%d\nseed: %d\nduration: 40s\ntopology:\n", i, rng.IntN(1000))
	share := make([]string, n)
	for r := range n {
		fmt.Fprintf(&b, "  - {region: r%d, pops: [{name: r%dp0, nodes: %d}]}\n", r, r, nodes[r])
		share[r] = fmt.Sprintf("r%dp0: %.6f", r, 1/float64(n))
	}
	writeDrawnNetwork(&b, lat, loss)
	fmt.Fprintf(&b, "rules:\n  - {name: api, key: ip, limit: %d, window: 10s, scope: global, on_partition: share}\n", limit)
	fmt.Fprintf(&b, "traffic:\n  - rule: api\n    keys: %d\n    rate: %g/s\n    share: {%s}\n", keys, float64(keys*limit)/10*mult, strings.Join(share, ", "))
	name := fmt.Sprintf("PoPs of %v nodes, %d keys at %gx a limit of %d, %dms, loss %g", nodes, keys, mult, limit, lat, loss)
	return b.String(), name
}

// PoPs of different sizes at a key's limit, with no fault, on fleets drawn
// at random (unevenScenario), in both region voices settings: each PoP is
// served at least 0.80 of what the central limiter serves it, on even
// demand. A node's unseen admits are held a flush wait and a horizon after
// each, and a node alone in its PoP reaches the others a flush slot sooner
// than a PoP's members do (through its publisher): at the limit it took
// twice the admits per node's share, and a one-node PoP beside a
// three-node PoP got 1.33 of its central figure, the three-node PoP 0.67
// (uneven-pops-at-limit). The allowance now paces a replica's share by its
// lag against the fleet's slowest (crdt's Allowance.Reach).
func TestUnevenPoPsAtTheLimitAcrossTheClass(t *testing.T) {
	runDrawnFleets(t, 5, unevenScenario, func(t *testing.T, name, text string, r Report) {
		low := 2.0
		for i, p := range r.Phases {
			for ri, rg := range p.Regions {
				c := r.Central.Phases[i].Regions[ri].Admitted
				if c > 0 {
					low = min(low, float64(rg.Admitted)/float64(c))
				}
			}
		}
		fleet, central, _ := inPhases(r, "healthy")
		t.Logf("%s: lowest PoP %.3f of central's, the fleet %.3f, max a/l %.3f", name, low, float64(fleet)/float64(central), r.MaxAdmittedRatio)
		assert.GreaterOrEqual(t, low, 0.80, text)
		assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.10, text)
	})
}
