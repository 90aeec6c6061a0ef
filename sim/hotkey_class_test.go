package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// hotKeyScenario writes a hot key at 1.1 times its limit, no fault, on a
// fleet drawn from rng: two to five regions of two to eight PoPs of one to
// three nodes, 20 to 150 ms and up to 1 % loss between regions, a limit of
// 300 to 5 000 per 10 s, the key's traffic spread evenly or weighted by
// PoP. It returns the YAML and a line that names the draw.
func hotKeyScenario(rng *rand.Rand, i int) (string, string) {
	nreg := 2 + rng.IntN(4)
	var b strings.Builder
	fmt.Fprintf(&b, "name: hot-key-class-%d\nseed: %d\nduration: 40s\ntopology:\n", i, rng.IntN(1000))
	pops, nodes := 0, 0
	var weights []string
	skewed := rng.IntN(2) == 0
	for r := range nreg {
		var s []string
		for p := range 2 + rng.IntN(7) {
			n := 1 + rng.IntN(3)
			name := fmt.Sprintf("r%dp%d", r, p)
			s = append(s, fmt.Sprintf("{name: %s, nodes: %d}", name, n))
			w := 1.0
			if skewed {
				w = []float64{0.2, 1, 3}[rng.IntN(3)]
			}
			weights = append(weights, fmt.Sprintf("%s: %g", name, w))
			pops++
			nodes += n
		}
		fmt.Fprintf(&b, "  - {region: r%d, pops: [%s]}\n", r, strings.Join(s, ", "))
	}
	lat := []int{20, 80, 150}[rng.IntN(3)]
	loss := []float64{0, 0.005, 0.01}[rng.IntN(3)]
	writeDrawnNetworkWith(&b, lat, loss, "{flush_interval: 50ms, peer_timeout: 1s, anti_entropy_interval: 5s}")
	limit := []int{300, 500, 1000, 5000}[rng.IntN(4)]
	fmt.Fprintf(&b, "rules:\n  - {name: api, key: ip, limit: %d, window: 10s, scope: global, on_partition: share}\n", limit)
	fmt.Fprintf(&b, "traffic:\n  - {rule: api, keys: 1, rate: %g/s, pattern: poisson, track: 1", 1.1*float64(limit)/10)
	if skewed {
		fmt.Fprintf(&b, ", share: {%s}", strings.Join(weights, ", "))
	}
	b.WriteString("}\n")
	name := fmt.Sprintf("%d regions, %d PoPs, %d nodes, limit %d, %dms, loss %g, skewed %v", nreg, pops, nodes, limit, lat, loss, skewed)
	return b.String(), name
}

// Hot keys at 1.1 times their limit as a class, on fleets drawn at random
// (hotKeyScenario), in both region voices settings: the fleet admits at
// least 0.95 of what the central limiter admits on the same arrivals, 0.97
// in at least 22 of the 24 runs, and its peak stays within 1.05 of the
// limit or 0.01 past the central limiter's own (the exact trailing count of
// a limit of 300 goes to 1.057 at the central limiter too). Limits of 300
// over 38 to 54 replicas took 0.956-0.978 before a crowded key's turns
// followed each replica's chance of a request in a turn's period (crdt's
// crowdedDraw), 0.968-0.987 now. 21 replicas on a limit of 300 over three
// regions with region voices admitted 0.955: a region whose stream had not
// yet reached some nodes at their first check of the peers was taken for
// cut off for a quarter of a second, and the heal's bounds held the key to
// what their lagging view said of the first window; a cut whose shares
// denied nothing now ends without them (0.974). The two runs left under
// 0.97, both with region voices: 54 replicas on a limit of 300 at 150 ms
// and 1 % loss between regions (0.968), where the turns past twice the
// share are bounded by what a surge may cash; and 40 replicas on a limit of
// 1 000 at 150 ms (0.966), a non-voice PoP's horizon counting its voice's
// flush slot.
func TestHotKeysGeneratedAcrossTheClass(t *testing.T) {
	runDrawnFleetsLikeCentral(t, 7, hotKeyScenario, 2)
}

// runDrawnFleetsLikeCentral runs the fleets draw draws from stream
// (runDrawnFleets) and checks that each admits at least 0.95 of what the
// central limiter admits on the same arrivals, 0.97 on all but maxLow of
// the runs, and peaks within 1.05 of the limit or 0.01 past central's own
// peak: over many keys the peak is the sliding estimate's own error on one
// of them, which the fleet's lag adds a little to (50 keys at 1.1 times a
// limit of 300 on 30 s windows: 1.077, central 1.073, on a stream of
// TestColdStartOfShareRulesAcrossTheClass's generator kept out of the
// repository).
func runDrawnFleetsLikeCentral(t *testing.T, stream uint64, draw func(*rand.Rand, int) (string, string), maxLow int) {
	t.Helper()
	var mu sync.Mutex
	var low []string // runs under 0.97 of central
	t.Cleanup(func() {
		if !t.Skipped() {
			assert.LessOrEqual(t, len(low), maxLow, "runs under 0.97 of central: %v", low)
		}
	})
	runDrawnFleets(t, stream, draw, func(t *testing.T, name, text string, r Report) {
		ratio := float64(r.Admitted) / float64(r.Central.Admitted)
		t.Logf("%s: admitted %d of central's %d (%.3f), max a/l %.3f (central %.3f)",
			name, r.Admitted, r.Central.Admitted, ratio, r.MaxAdmittedRatio, r.Central.MaxAdmittedRatio)
		assert.GreaterOrEqual(t, ratio, 0.95, text)
		assert.LessOrEqual(t, r.MaxAdmittedRatio, max(1.05, r.Central.MaxAdmittedRatio+0.01), text)
		if ratio < 0.97 {
			mu.Lock()
			low = append(low, fmt.Sprintf("%s (%s): %.3f", name, t.Name(), ratio))
			mu.Unlock()
		}
	})
}
