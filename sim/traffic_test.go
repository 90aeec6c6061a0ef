package sim

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPatternsArrivalCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stream  string
		want    float64
		within  float64
		changes string
	}{
		{"constant", "rate: 100/s, pattern: constant", 2000, 0.001, ""},
		{"poisson", "rate: 100/s, pattern: poisson", 2000, 0.08, ""},
		{"onoff", "rate: 100/s, pattern: onoff, on: 1s, off: 3s", 500, 0.12, ""},
		{"ramp", "rate: 0/s, pattern: ramp, ramp_to: 200/s", 2000, 0.08, ""},
		{"window of the run", "rate: 100/s, pattern: constant, start: 5s, end: 15s", 1000, 0.002, ""},
		{"rate change", "rate: 100/s, pattern: constant", 3000, 0.002, ", changes: [{at: 10s, rate: 200/s}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(minimal, "duration: 10s", "duration: 20s", 1)
			src = strings.Replace(src, "{rule: api, rate: 5/s}", "{rule: api, "+tc.stream+tc.changes+"}", 1)
			res, err := Run(mustParse(t, src), Options{NoCentral: true})
			require.NoError(t, err)
			assert.InEpsilon(t, tc.want, float64(res.Report.Requests), tc.within)
		})
	}
}

func TestZipfTable(t *testing.T) {
	g := newRNG(1, 2)
	tab := newZipfTable(50, 1.2)
	counts := make([]int, 50)
	const n = 200000
	for range n {
		counts[tab.draw(g)]++
	}
	h := 0.0
	for k := 1; k <= 50; k++ {
		h += 1 / math.Pow(float64(k), 1.2)
	}
	for _, k := range []int{0, 1, 4, 20} {
		want := n / math.Pow(float64(k+1), 1.2) / h
		assert.InEpsilon(t, want, float64(counts[k]), 0.05, "key %d", k)
	}
}

// Anycast keys stay on their PoP; while every node of a PoP is down its
// keys are served elsewhere, and come back when it restarts.
func TestAnycastPoPLossMovesKeys(t *testing.T) {
	sc, err := Load("../scenarios/anycast-pop-loss.yaml")
	require.NoError(t, err)
	var log bytes.Buffer
	res, err := Run(sc, Options{RateScale: testScale, Log: &log})
	require.NoError(t, err)
	home := map[string]string{}
	moved := map[string]bool{}
	sc2 := bufio.NewScanner(&log)
	for sc2.Scan() {
		f := strings.Split(sc2.Text(), ",")
		whole, _, _ := strings.Cut(f[0], ".")
		ms, err := strconv.Atoi(whole)
		require.NoError(t, err)
		key, popName := f[5], f[2]
		switch {
		case ms < 40000: // before the crash
			if h, ok := home[key]; ok {
				require.Equal(t, h, popName, "key %s left its PoP while healthy", key)
			}
			home[key] = popName
		case ms < 80000: // ams down
			require.NotEqual(t, "ams", popName, "a request reached ams while it was down")
			if home[key] == "ams" {
				moved[key] = true
			}
		default:
			if h, ok := home[key]; ok {
				require.Equal(t, h, popName, "key %s did not return home", key)
			}
		}
	}
	assert.NotEmpty(t, moved, "ams's keys were served elsewhere")
	assert.Greater(t, res.Report.Phases[1].MaxAdmittedRatio, 1.0, "moved keys start afresh on their new PoP")
}

// A restarted node is a new replica: new incarnation, empty store, then
// the PoP's state by join sync.
func TestRestartNewIncarnationAndJoinSync(t *testing.T) {
	src := strings.Replace(minimal, "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 4s, restart: [ams-1]}", 1)
	e, err := newEngine(mustParse(t, src), Options{})
	require.NoError(t, err)
	e.end = int64(4100e6)
	require.NoError(t, e.run())
	nd := e.nodes[0]
	require.Equal(t, "ams-1", nd.name)
	assert.EqualValues(t, len(e.nodes)+1, nd.inc, "the next incarnation of the fleet")
	assert.EqualValues(t, nd.inc, nd.n.Link().Self().Incarnation)
	v, err := nd.n.View(e.nodeNow(nd, e.now), "api", "k0")
	require.NoError(t, err)
	var total uint64
	for _, w := range v.Windows {
		total += w.Total
	}
	assert.Positive(t, total, "the restarted node learnt the live windows from its PoP")
}

// Anycast keys follow the shares; a change of shares moves only about as
// many keys as the shares moved; a PoP that is down sends its keys elsewhere.
func TestAnycastRouting(t *testing.T) {
	g := newRNG(3, 4)
	s := &source{anycast: true, keys: make([]*keyInfo, 10000), weights: []float64{0.5, 0.3, 0.2}}
	s.drawHomes(g)
	upAll := func(int) bool { return true }
	count := func() []int {
		c := make([]int, 3)
		for _, p := range s.cur {
			c[p]++
		}
		return c
	}
	s.route(upAll)
	before := append([]int32(nil), s.cur...)
	c := count()
	assert.InDelta(t, 5000, c[0], 200)
	assert.InDelta(t, 3000, c[1], 200)

	s.weights = []float64{0.4, 0.4, 0.2}
	s.route(upAll)
	moved := 0
	for k := range s.cur {
		if s.cur[k] != before[k] {
			moved++
		}
	}
	assert.InDelta(t, 1000, moved, 200, "a 10 %% shift moves about 10 %% of the keys")

	s.route(func(p int) bool { return p != 0 })
	c = count()
	assert.Zero(t, c[0])
	assert.Equal(t, 10000, c[1]+c[2])
	s.route(upAll)
	assert.InDelta(t, 4000, count()[0], 200, "keys return home")
}

// rng draws exactly what math/rand/v2 draws from the same source.
func TestRNGMatchesMathRand(t *testing.T) {
	g := newRNG(5, 6)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 10000 {
		switch i % 4 {
		case 0:
			require.Equal(t, r.Float64(), g.Float64())
		case 1:
			n := 1 + i%1000
			require.Equal(t, r.IntN(n), g.IntN(n))
		case 2:
			require.Equal(t, r.Int64N(1<<20), g.Int64N(1<<20))
		default:
			require.Equal(t, r.ExpFloat64(), g.ExpFloat64())
		}
	}
}
