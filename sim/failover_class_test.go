package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failoverScenario writes a failover during a cut of a fleet drawn from
// rng: two or three regions of one to three PoPs of one to three nodes,
// one region cut off from 20 s to 60 s, and its clients moving to the other
// side (to one PoP of it, or spread over it) at the cut, inside the window
// the cut began in, or inside the cut's first whole window; 10 s windows,
// 10 to 100 keys at 1.5 to 3 times their limit, 40 to 150 ms between
// regions, up to 1 % of those messages lost. It returns the YAML and a line
// that names the draw.
func failoverScenario(rng *rand.Rand, i int) (string, string) {
	return failoverScenarioIn(rng, i, 10)
}

// failoverScenarioIn is failoverScenario with windows of width seconds:
// the cut begins 2 x (width - 10) s later and lasts four windows.
func failoverScenarioIn(rng *rand.Rand, i, width int) (string, string) {
	return failoverScenarioAt(rng, i, width, 20+2*(width-10))
}

// failoverScenarioAt is failoverScenarioIn with the cut at cutAt s.
func failoverScenarioAt(rng *rand.Rand, i, width, cutAt int) (string, string) {
	nreg := 2 + rng.IntN(2)
	regions := drawRegions(rng, nreg, 3)
	cut := rng.IntN(nreg)
	var all, other []string
	for r, ps := range regions {
		for _, p := range ps {
			all = append(all, p.name)
			if r != cut {
				other = append(other, p.name)
			}
		}
	}
	limit, keys, mult, at, lat, loss := drawLoad(rng)
	even := 1 / float64(len(all))
	share := make([]string, len(all))
	for j, p := range all {
		share[j] = fmt.Sprintf("%s: %.6f", p, even)
	}
	moved := make([]string, len(other))
	to := "spread"
	if rng.IntN(2) == 0 {
		to = other[rng.IntN(len(other))]
	}
	for j, p := range other {
		v := 1 / float64(len(other))
		if to != "spread" {
			v = even
			if p == to {
				v = 1 - even*float64(len(other)-1)
			}
		}
		moved[j] = fmt.Sprintf("%s: %.6f", p, v)
	}
	var b strings.Builder
	// The cut lasts four windows; the clients move up to 15 s after it.
	at += cutAt - 20
	writeFailoverScenario(&b, fmt.Sprintf("failover-class-%d", i), rng.IntN(1000), regions, lat, loss,
		limit, width, keys, mult, share, moved, at, cut, cutAt)
	name := fmt.Sprintf("%d regions, r%d cut, %d keys at %gx a limit of %d, moving at %ds to %s, %dms, loss %g",
		nreg, cut, keys, mult, limit, at, to, lat, loss)
	return b.String(), name
}

// drawLoad draws a failover's load and network as failoverScenario does: a
// limit, the number of keys and their demand over it, when the clients
// move (s), the latency between regions (ms) and the loss there.
func drawLoad(rng *rand.Rand) (limit, keys int, mult float64, at, lat int, loss float64) {
	limit = []int{500, 1000}[rng.IntN(2)]
	keys = []int{10, 30, 100}[rng.IntN(3)]
	mult = []float64{1.5, 2, 3}[rng.IntN(3)]
	at = []int{20, 23, 25, 28, 32, 35}[rng.IntN(6)]
	lat = []int{40, 90, 150}[rng.IntN(3)]
	loss = []float64{0, 0.005, 0.01}[rng.IntN(3)]
	return limit, keys, mult, at, lat, loss
}

// drawnPoP is a PoP of a drawn fleet.
type drawnPoP struct {
	name  string
	nodes int
}

// drawRegions draws nreg regions of one to maxPoPs PoPs of one to three
// nodes each, PoP p of region r named "r<r>p<p>".
func drawRegions(rng *rand.Rand, nreg, maxPoPs int) [][]drawnPoP {
	regions := make([][]drawnPoP, nreg)
	for r := range regions {
		for p := range 1 + rng.IntN(maxPoPs) {
			regions[r] = append(regions[r], drawnPoP{fmt.Sprintf("r%dp%d", r, p), 1 + rng.IntN(3)})
		}
	}
	return regions
}

// writeFailoverScenario writes a drawn failover's scenario to b: the
// regions' PoPs, the drawn network, one global share rule of limit per
// width seconds, keys at mult times it spread by share and moving to moved
// at at seconds, region cut cut off from cutAt for four windows.
func writeFailoverScenario(b *strings.Builder, name string, seed int, regions [][]drawnPoP, lat int, loss float64,
	limit, width, keys int, mult float64, share, moved []string, at, cut, cutAt int) {
	heal := cutAt + 4*width
	fmt.Fprintf(b, "name: %s\nseed: %d\nduration: %ds\ntopology:\n", name, seed, heal+10)
	for r, ps := range regions {
		var s []string
		for _, p := range ps {
			s = append(s, fmt.Sprintf("{name: %s, nodes: %d}", p.name, p.nodes))
		}
		fmt.Fprintf(b, "  - {region: r%d, pops: [%s]}\n", r, strings.Join(s, ", "))
	}
	writeDrawnNetwork(b, lat, loss)
	fmt.Fprintf(b, "rules:\n  - {name: api, key: ip, limit: %d, window: %ds, scope: global, on_partition: share}\n", limit, width)
	fmt.Fprintf(b, "traffic:\n  - rule: api\n    keys: %d\n    rate: %g/s\n", keys, float64(keys*limit)/float64(width)*mult)
	fmt.Fprintf(b, "    share: {%s}\n    changes: [{at: %ds, share: {%s}}]\n", strings.Join(share, ", "), at, strings.Join(moved, ", "))
	var rest []string
	for r := range regions {
		if r != cut {
			rest = append(rest, fmt.Sprintf("r%d", r))
		}
	}
	fmt.Fprintf(b, "events:\n  - {at: %ds, partition: [[r%d], [%s]]}\n  - {at: %ds, heal: true}\n", cutAt, cut, strings.Join(rest, ", "), heal)
}

// Failovers as a class, on fleets drawn at random (failoverScenario), in
// both region voices settings: however the fleet, the keys and the moment
// of the failover are drawn, the peak stays within 1.20 of the limit (the
// bound TestFailoversAcrossTheClass holds its scenarios to), and the side
// the clients move to admits at least 0.75 of what the central limiter
// admits in the cut, 0.80 in at least 10 of the 12 draws in both voices
// settings (failoverFloor). 8 of 12 did before a replica's share of the
// headroom was paced by its lag (crdt's Allowance.Reach; 0.36 at the
// least): a key's part of the admits at its limit followed its PoPs'
// nodes and lag, not its demand, and a side's share and its takeover are
// measured in that part. 10 of 12 did while a failover of one region of
// three, which sits at the least growth that reads as one (pop's
// partJump), could keep its side's share of before (0.79 at the least);
// from that growth down to 1.25 times a share now grows by the rule's
// share_rise (pop's DefaultShareRise), and every draw takes 0.82 at least.
func TestFailoversGeneratedStayUnderTheirPeak(t *testing.T) {
	runDrawnFleets(t, 1, failoverScenario, failoverCheck(t, 0.80))
}

// Failovers at the moment of the cut, on fleets drawn at random as above
// (another stream), every failover at the cut: a site that dies looks
// exactly like one cut off. Measured from the cut on, the demand after the
// failover was the baseline, and the side the clients moved to kept its
// share of before the cut: 0.29-0.72 of the central limiter's admits in
// the cut on TestFailoversGeneratedStayUnderTheirPeak's draws at the cut.
// Each node now also knows its demand of the window before the cut (crdt's
// OwnDemand), and measures the cut against it (pop's preCut). Every draw
// takes 0.80 at least (7 of 12 before the shares were paced by lag).
func TestFailoversAtTheCutAcrossTheClass(t *testing.T) {
	atCut := regexp.MustCompile(`(changes: \[\{at: |moving at )\d+s`)
	runDrawnFleets(t, 2, func(rng *rand.Rand, i int) (string, string) {
		text, name := failoverScenario(rng, i)
		return atCut.ReplaceAllString(text, "${1}20s"), atCut.ReplaceAllString(name, "${1}20s")
	}, failoverCheck(t, 0.80))
}

// failoverCheck returns the check of one drawn failover's report: the
// peak within 1.20 of the limit, and the admits in the cut against the
// central limiter's held by failoverFloor(t, least).
func failoverCheck(t *testing.T, least float64) func(t *testing.T, name, text string, r Report) {
	floor := failoverFloor(t, least)
	return func(t *testing.T, name, text string, r Report) {
		fleet, central, _ := inPhases(r, "partitioned")
		t.Logf("%s: in the cut %d of central's %d (%.3f), max a/l %.3f",
			name, fleet, central, float64(fleet)/float64(central), r.MaxAdmittedRatio)
		assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.20, text)
		floor(t, name, float64(fleet)/float64(central), text)
	}
}

// failoverFloor returns a check of one draw's admits in the cut against
// the central limiter's (ratio) that holds each draw to least at least,
// and, once every draw ran, at least 10 of the 12 to 0.80 in both voices
// settings (the class's goal, which two draws of a class still miss).
func failoverFloor(t *testing.T, least float64) func(t *testing.T, name string, ratio float64, text string) {
	var mu sync.Mutex
	low := map[string]bool{} // draws under 0.80 in a voices setting
	ran := 0
	t.Cleanup(func() {
		if ran == 0 || t.Skipped() {
			return
		}
		assert.LessOrEqual(t, len(low), 2, "draws under 0.80 of central in the cut: %v", low)
	})
	return func(t *testing.T, name string, ratio float64, text string) {
		assert.GreaterOrEqual(t, ratio, least, text)
		mu.Lock()
		defer mu.Unlock()
		ran++
		if ratio < 0.80 {
			low[name] = true
		}
	}
}

// writeDrawnNetwork writes the network and replication sections of a drawn
// fleet: lat ms between regions, loss of those messages lost, and the
// replication settings of a fleet on 10 s windows (drawnReplication).
func writeDrawnNetwork(b *strings.Builder, lat int, loss float64) {
	writeDrawnNetworkWith(b, lat, loss, drawnReplication)
}

// drawnReplication is the replication section of the drawn fleets.
const drawnReplication = "{flush_interval: 50ms, peer_timeout: 300ms, anti_entropy_interval: 5s}"

// writeDrawnNetworkWith is writeDrawnNetwork with the replication section
// repl.
func writeDrawnNetworkWith(b *strings.Builder, lat int, loss float64, repl string) {
	fmt.Fprintf(b, "network:\n  intra_pop: {latency: 1ms, jitter: 200us}\n  inter_pop: {latency: 10ms, jitter: 2ms}\n")
	fmt.Fprintf(b, "  inter_region: {latency: %dms, jitter: 10ms, loss: %g}\n", lat, loss)
	fmt.Fprintf(b, "replication: %s\n", repl)
}

// runDrawnFleets runs 12 fleets drawn by draw from the seeded stream, each
// with region voices off and on, in parallel, and checks each report. With
// SIM_CLASS_DUMP set to a directory it also writes each draw there as a
// scenario file (<test>-<draw>.yaml), for `go run ./cmd/sim -scenario`.
func runDrawnFleets(t *testing.T, stream uint64, draw func(*rand.Rand, int) (string, string),
	check func(t *testing.T, name, text string, r Report)) {
	t.Helper()
	accuracyTest(t)
	rng := rand.New(rand.NewPCG(38, stream+classStreamOffset(t)))
	dump := os.Getenv("SIM_CLASS_DUMP")
	for i := range 12 {
		text, name := draw(rng, i)
		if dump != "" {
			f := filepath.Join(dump, fmt.Sprintf("%s-%d.yaml", t.Name(), i))
			require.NoError(t, os.WriteFile(f, []byte(text), 0o644), "SIM_CLASS_DUMP: a directory to write the draws to")
		}
		for _, voices := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/voices=%v", i, voices), func(t *testing.T) {
				t.Parallel()
				sc, err := Parse([]byte(text))
				require.NoError(t, err, text)
				sc.Replication.RegionVoices = new(voices)
				res, err := Run(sc, Options{})
				require.NoError(t, err)
				check(t, name, text, res.Report)
			})
		}
	}
}

// classStreamOffset returns what SIM_CLASS_STREAM adds to each class's
// stream (0 when unset): `SIM_CLASS_STREAM=1000 go test ./sim -run
// AcrossTheClass -v` draws other fleets of every class, which a class's
// floors are not tuned to (docs/replication.md, "Other draws of the same
// classes").
func classStreamOffset(t *testing.T) uint64 {
	v := os.Getenv("SIM_CLASS_STREAM")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, "SIM_CLASS_STREAM: a stream offset, 0 or more")
	return n
}

// Failovers with 30 s windows, on fleets drawn as above (another stream):
// the cut comes two windows later (at 60 s) and lasts four windows, the
// clients moving up to 15 s into it. Every draw admits at least 0.81 of
// what the central limiter admits in the cut in both region voices
// settings, peaks within 1.04. The twelfth was the class's known miss
// (0.745-0.750 of central): a region of one one-node PoP, a fifth of the
// demand, fails over to a side of four PoPs, whose demand grows 1.25
// times, under the growth a side measured against its demand before the
// cut must show to take the other side's share (1.5 times, pop's
// partJump: a rise on both sides of up to that much is not told from a
// failover); such a growth now grows a share by the rule's share_rise
// (pop's DefaultShareRise).
func TestFailoversWithLongWindowsAcrossTheClass(t *testing.T) {
	runDrawnFleets(t, 5, func(rng *rand.Rand, i int) (string, string) {
		text, name := failoverScenarioIn(rng, i, 30)
		return text, name + ", 30 s windows"
	}, failoverCheck(t, 0.80))
}

// Failovers in the fleet's first window: the draws of
// TestFailoversWithLongWindowsAcrossTheClass with the cut 20 s into the
// first 30 s window, before any window was seen whole. A side then has no
// window before the cut to measure its demand against; each node takes its
// demand in the part of the window before the cut, at its rate over a
// whole window, as the baseline (pop's preCut), so that a failover at the
// cut or a few seconds after it is not folded into a baseline counted from
// the cut on. Every draw takes 0.83 of central at least (0.756 for the
// fifth of the demand failing over, before a growth under partJump grew a
// share by the rule's share_rise).
func TestFailoversInTheFirstWindowAcrossTheClass(t *testing.T) {
	runDrawnFleets(t, 5, func(rng *rand.Rand, i int) (string, string) {
		text, name := failoverScenarioAt(rng, i, 30, 20)
		return text, name + ", 30 s windows, cut in the first"
	}, failoverCheck(t, 0.80))
}
