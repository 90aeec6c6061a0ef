package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// hourWindowsScenario writes a cut of one-hour windows on a fleet drawn
// from rng: two to four regions of one to three PoPs of one to three
// nodes, one region cut off for 20 to 45 minutes starting 20 to 65 minutes
// in, one to five keys at 1.2 to 2.2 times a limit of 1 000 to 5 000 an
// hour, their traffic weighted by PoP. It returns the YAML and a line that
// names the draw.
func hourWindowsScenario(rng *rand.Rand, i int) (string, string) {
	nreg := 2 + rng.IntN(3)
	var b strings.Builder
	cutAt := []int{20, 40, 50, 65}[rng.IntN(4)]
	long := []int{20, 30, 45}[rng.IntN(3)]
	fmt.Fprintf(&b, "name: hour-class-%d\nseed: %d\nduration: %dm\ntopology:\n", i, rng.IntN(1000), cutAt+long+10)
	var weights []string
	for r := range nreg {
		var s []string
		for p := range 1 + rng.IntN(3) {
			name := fmt.Sprintf("r%dp%d", r, p)
			s = append(s, fmt.Sprintf("{name: %s, nodes: %d}", name, 1+rng.IntN(3)))
			weights = append(weights, fmt.Sprintf("%s: %g", name, []float64{0.5, 1, 2}[rng.IntN(3)]))
		}
		fmt.Fprintf(&b, "  - {region: r%d, pops: [%s]}\n", r, strings.Join(s, ", "))
	}
	lat := []int{40, 90, 150}[rng.IntN(3)]
	loss := []float64{0, 0.005, 0.01}[rng.IntN(3)]
	writeDrawnNetworkWith(&b, lat, loss, "{flush_interval: 1s, peer_timeout: 4s, anti_entropy_interval: 60s}")
	limit := []int{1000, 2000, 5000}[rng.IntN(3)]
	keys := 1 + rng.IntN(5)
	mult := []float64{1.2, 1.5, 2.2}[rng.IntN(3)]
	fmt.Fprintf(&b, "rules:\n  - {name: api, key: ip, limit: %d, window: 1h, scope: global, on_partition: share}\n", limit)
	fmt.Fprintf(&b, "traffic:\n  - {rule: api, keys: %d, rate: %.4f/s, share: {%s}}\n", keys, float64(keys*limit)*mult/3600, strings.Join(weights, ", "))
	cut := rng.IntN(nreg)
	fmt.Fprintf(&b, "events:\n  - {at: %dm, partition: [[r%d]]}\n  - {at: %dm, heal: true}\n", cutAt, cut, cutAt+long)
	name := fmt.Sprintf("%d regions, r%d cut at %dm for %dm, %d keys at %gx a limit of %d an hour, %dms, loss %g",
		nreg, cut, cutAt, long, keys, mult, limit, lat, loss)
	return b.String(), name
}

// Cuts of one-hour windows as a class, on fleets drawn at random
// (hourWindowsScenario), in both region voices settings: the fleet admits
// at least 0.85 of what the central limiter admits in the cut, and its
// peak stays within 1.10 of the limit (0.994-1.016 of central, peaks
// within 1.004, at this test's writing).
func TestHourWindowsAcrossTheClass(t *testing.T) {
	runDrawnFleets(t, 9, hourWindowsScenario, func(t *testing.T, name, text string, r Report) {
		fleet, central, _ := inPhases(r, "partitioned")
		ratio := float64(fleet) / float64(central)
		t.Logf("%s: in the cut %d of central's %d (%.3f), max a/l %.3f (central %.3f)",
			name, fleet, central, ratio, r.MaxAdmittedRatio, r.Central.MaxAdmittedRatio)
		assert.GreaterOrEqual(t, ratio, 0.85, text)
		assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.10, text)
	})
}
