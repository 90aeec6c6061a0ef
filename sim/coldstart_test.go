package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coldFleet is a fleet that starts at once under Zipf traffic on one
// global rule of a 10 s window, its hottest keys far above their limit:
// the shape of scripts/gen-edge-scenarios.sh -fleet, smaller.
type coldFleet struct {
	pops, regions, nodes int
	limit, rate, keys    int
	seed                 uint64
	voices               bool
}

func (f coldFleet) String() string {
	return fmt.Sprintf("%dx%d-in-%d/limit=%d/%d-per-s/%d-keys/seed=%d/voices=%v",
		f.pops, f.nodes, f.regions, f.limit, f.rate, f.keys, f.seed, f.voices)
}

// scenario returns f's scenario, dur long, with 0.5 % loss between regions.
func (f coldFleet) scenario(t *testing.T, dur time.Duration) *Scenario {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: cold-start\nseed: %d\nduration: %s\n", f.seed, dur)
	gridTopology(&b, f.regions, f.pops/f.regions, f.nodes, 1)
	fmt.Fprintf(&b, `network:
  intra_pop: {latency: 1ms, jitter: 200us}
  inter_pop: {latency: 10ms, jitter: 2ms}
  inter_region: {latency: 80ms, jitter: 10ms, loss: 0.005}
replication: {flush_interval: 50ms, peer_timeout: 2s, anti_entropy_interval: 5s, region_voices: %v}
rules:
  - {name: api, key: ip, limit: %d, window: 10s, scope: global, on_partition: keep}
traffic:
  - {rule: api, keys: %d, spread: zipf, zipf_s: 1.05, rate: %d/s, track: 1}
`, f.voices, f.limit, f.keys, f.rate)
	sc, err := Parse([]byte(b.String()))
	require.NoError(t, err)
	return sc
}

// A fleet that starts at once with hot keys above their limit stays
// within 1.10 of the limit from its first second, whatever its shape:
// PoPs of one to four nodes, about as many nodes as the limit or a third
// of it, other seeds, region voices on and off. Every replica's first
// admits are unseen at the same moment, and every replica reads the
// counts of its first lags: the near-limit allowance's cold start
// (crdt/allowance_cold.go). The first two seconds of each run: 1.01-1.07
// of the limit; before it, 1.14-2.07 (a replica could hold five unseen
// admits of a key within half its limit, every replica at once). The
// fleet admits about what the central limiter does on the same arrivals.
func TestColdStartAcrossTheClass(t *testing.T) {
	accuracyTest(t)
	for _, f := range []coldFleet{
		{pops: 30, regions: 3, nodes: 3, limit: 200, rate: 6000, keys: 100, seed: 1, voices: true},
		{pops: 30, regions: 3, nodes: 3, limit: 200, rate: 6000, keys: 100, seed: 2, voices: false},
		{pops: 24, regions: 4, nodes: 2, limit: 100, rate: 5000, keys: 200, seed: 7, voices: true},
		{pops: 40, regions: 5, nodes: 1, limit: 60, rate: 4000, keys: 300, seed: 11, voices: true},
		{pops: 20, regions: 2, nodes: 4, limit: 300, rate: 8000, keys: 50, seed: 23, voices: false},
	} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			res, err := Run(f.scenario(t, 2*time.Second), Options{})
			require.NoError(t, err)
			r := res.Report
			t.Logf("max a/l %.3f (central %.3f), admitted %d of central's %d", r.MaxAdmittedRatio, r.Central.MaxAdmittedRatio, r.Admitted, r.Central.Admitted)
			assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.10)
			assert.GreaterOrEqual(t, float64(r.Admitted), 0.95*float64(r.Central.Admitted))
		})
	}
}

// A fleet that starts at once takes the PoPs it expects for cut off until
// it first hears them, a quarter second here; that start is no cut, and
// its end no heal. The heal window's bounds (pop/share_heal.go) held a key
// to what the node's view said in that window, which at a start lags the
// counts (sparse totals below a quarter of the limit move in steps): with
// 60 s windows the fleet refused from 0.68 of the limit to the end of its
// first window (0.85 of central's admits over it).
func TestLongWindowsFromAColdStart(t *testing.T) {
	runScenarioSeeds(t, "long-window-cold-start", 0.97)
}

// runScenarioSeeds runs the built-in scenario name at its seed and seeds 1
// and 2, in both region voices settings, and checks that each run admits
// at least floor of what the central limiter admits and peaks within 1.05
// of the limit.
func runScenarioSeeds(t *testing.T, name string, floor float64) {
	accuracyTest(t)
	for _, seed := range []uint64{0, 1, 2} {
		for _, voices := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/voices=%v", seed, voices), func(t *testing.T) {
				t.Parallel()
				sc, err := Load("../scenarios/" + name + ".yaml")
				require.NoError(t, err)
				sc.Replication.RegionVoices = new(voices)
				opts := Options{}
				if seed != 0 {
					opts.Seed = &seed
				}
				res, err := Run(sc, opts)
				require.NoError(t, err)
				r := res.Report
				t.Logf("admitted %d of central's %d (%.3f), max a/l %.3f", r.Admitted, r.Central.Admitted,
					float64(r.Admitted)/float64(r.Central.Admitted), r.MaxAdmittedRatio)
				assert.GreaterOrEqual(t, float64(r.Admitted), floor*float64(r.Central.Admitted))
				assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.05)
			})
		}
	}
}

// A fleet that starts cut in two (start-cut: no window seen whole before
// the cut, so every key is split by PoP count) admits what the central
// limiter does, within 1.05 of the limit, in both region voices settings
// and over seeds. With region voices a node holds another region's counts
// as its aggregate ("region/*") and is told a region cut off with its
// aggregate; counted as PoPs of their own, eu and us (four PoPs) took 0.6
// of the limit and ap (one) 1/7, and the fleet admitted 0.867-0.869 of
// central's; the replication core now tells the node the fleet's PoPs
// (pop's Link.SetPoPs), and an aggregate stands for them.
func TestStartCutSplitsByPoPs(t *testing.T) {
	runScenarioSeeds(t, "start-cut", 0.95)
}
