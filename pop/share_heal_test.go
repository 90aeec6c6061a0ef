package pop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// healRun drives eu and us (limit 100 in 10 s windows): a healthy window
// with even traffic, then a cut in which us's demand stops and eu's is
// euDemand(w, f) requests a step in window w of the cut at part f of it
// (at ten times the limit: one key's growth, a surge, so eu keeps its
// half), a heal at part healAt of the cut's third window, every count
// exchanged, and eu's demand going on for two more windows. It returns the instants
// of eu's and us's admits, and the heal's window.
func healRun(t *testing.T, healAt float64, euDemand func(w int64, f float64) int) (admits []int64, healWin int64) {
	t.Helper()
	eu, us := shareNodes(t, Share)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	step := W / 100
	for i := int64(0); i < 100; i++ {
		now := start + i*step
		for _, n := range []*Node{eu, us} {
			if d, _ := n.Decide(now, "api", "k", 1); d.Allowed {
				admits = append(admits, now)
			}
		}
		sync2(t, now, eu, us)
	}
	cut := start + W
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	us.Link().SetUnheard(cut, []string{"eu/ams"})
	heal := cut + 2*W + int64(healAt*float64(W))
	healed := false
	for now := cut; now < cut+5*W; now += step {
		if now >= heal && !healed {
			eu.Link().SetUnheard(heal, nil)
			us.Link().SetUnheard(heal, nil)
			sync2(t, heal, eu, us)
			healed = true
		}
		for j := 0; j < euDemand((now-cut)/W, float64((now-cut)%W)/float64(W)); j++ {
			if d, _ := eu.Decide(now, "api", "k", 1); d.Allowed {
				admits = append(admits, now)
			}
		}
		if healed {
			sync2(t, now, eu, us)
		}
	}
	return admits, (cut + 2*W) / W
}

// maxTrailing returns the most admits of one trailing window of width w
// at any admit from instant from on.
func maxTrailing(admits []int64, w, from int64) int {
	most, j := 0, 0
	for i, at := range admits {
		for admits[j] <= at-w {
			j++
		}
		if at >= from {
			most = max(most, i-j+1)
		}
	}
	return most
}

// A side held to half the limit in a cut while its demand was ten times
// the limit: the heal, half-way through a window, opens half the limit at
// once. The rest of that window may spend only what keeps the window's
// admits spread evenly (25 before the heal, so about 29 after it), and the
// trailing window never passes the limit by more than HealSlack of it;
// what was held back opens at the next window's start.
func TestShareHealWindowSpreadsTheBurst(t *testing.T) {
	W := int64(10 * time.Second)
	admits, hw := healRun(t, 0.5, func(int64, float64) int { return 10 })
	heal := hw*W + W/2
	var before, after, next int
	for _, at := range admits {
		switch {
		case at >= hw*W && at < heal:
			before++
		case at >= heal && at < (hw+1)*W:
			after++
		case at >= (hw+1)*W && at < (hw+1)*W+W/10:
			next++
		}
	}
	t.Logf("heal window: %d before the heal, %d after; %d in the next window's first tenth", before, after, next)
	assert.InDelta(t, 25, before, 2, "half of its half of the limit")
	assert.LessOrEqual(t, before+after, 60, "no burst into the heal's window")
	assert.GreaterOrEqual(t, before+after, 50, "the window's even spread is spent")
	assert.Greater(t, next, 20, "what was held back opens at the next window's start")
	most := maxTrailing(admits, W, heal)
	t.Logf("most in a trailing window after the heal: %d (limit 100)", most)
	assert.LessOrEqual(t, most, 100+int(HealSlack*100)+1)
}

// A key whose demand starts only after the heal is not held by it beyond
// half the limit plus the slack: a key the cut did not hold back spends
// as it would without a cut.
func TestShareHealWindowLeavesNewDemand(t *testing.T) {
	W := int64(10 * time.Second)
	admits, hw := healRun(t, 0.5, func(w int64, f float64) int {
		if w < 2 || w == 2 && f < 0.6 {
			return 0
		}
		return 1
	})
	heal := hw*W + W/2
	after := 0
	for _, at := range admits {
		if at >= heal && at < (hw+1)*W {
			after++
		}
	}
	require.NotZero(t, after)
	assert.Equal(t, 40, after, "one request a step, all of them admitted")
}

// A cut whose last window was spent late (eu's demand came in its last
// quarter) heals at a window's edge: the next window weighs that window
// as its marks say it was spent, not as if spread evenly, and the
// trailing window stays at the limit.
func TestShareHealWeighsTheCutsLastWindowAsSpent(t *testing.T) {
	W := int64(10 * time.Second)
	admits, hw := healRun(t, 1, func(w int64, f float64) int {
		if w < 2 || w == 2 && f < 0.75 {
			return 0
		}
		return 10
	})
	late := 0
	for _, at := range admits {
		if at >= hw*W+3*W/4 && at < (hw+1)*W {
			late++
		}
	}
	require.Greater(t, late, 30, "the cut's last window was spent in its last quarter")
	most := maxTrailing(admits, W, (hw+1)*W)
	t.Logf("%d admits in the last quarter of the cut's last window; most in a trailing window after the heal: %d (limit 100)", late, most)
	assert.LessOrEqual(t, most, 100+int(HealSlack*100)+1)
}

// Decisions race with the cut's marks and the heal window's state: run
// with -race. Each goroutine decides on the same keys at its own instants
// of a cut, its hold and the window the heal ends in.
func TestShareHealWindowConcurrentDecisions(t *testing.T) {
	eu, us := shareNodes(t, Share)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	healthyWindow(t, eu, us, start, W, 1, 1)
	cut, heal := start+W, start+3*W+W/2
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	keys := []string{"k", "a", "b"}
	phase := func(from, to int64) {
		done := make(chan int, 4)
		for g := range 4 {
			go func() {
				admitted := 0
				for i := int64(0); i < 200; i++ {
					now := from + (to-from)*i/200 + int64(g)
					if d, err := eu.Decide(now, "api", keys[int(i)%len(keys)], 1); err == nil && d.Allowed {
						admitted++
					}
				}
				done <- admitted
			}()
		}
		for range 4 {
			<-done
		}
	}
	phase(cut, heal)
	eu.Link().SetUnheard(heal, nil)
	phase(heal, heal+int64(DefaultHealHold))
	phase(heal+int64(DefaultHealHold), start+4*W)
	phase(start+4*W, start+5*W)
	assert.False(t, eu.Partition(start+5*W).Partitioned)
}

// A window's count as the cut's marks say it came: linear between the
// marks, none at the window's start, the whole count at its end; a mark out
// of order or past the total is left out.
func TestSpentCurve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		marks [profileMarks]profileMark
		total float64
		after map[float64]float64 // elapsed part -> count after it
	}{
		{"late", [profileMarks]profileMark{{0.25, 10}, {0.5, 20}, {0.75, 80}}, 100,
			map[float64]float64{0: 100, 0.25: 90, 0.5: 80, 0.75: 20, 0.875: 10, 1: 0}},
		{"no marks: even", [profileMarks]profileMark{}, 100,
			map[float64]float64{0: 100, 0.5: 50, 1: 0}},
		{"a mark past the total is left out", [profileMarks]profileMark{{0.5, 60}, {0.75, 120}}, 100,
			map[float64]float64{0.5: 40, 0.75: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c spentCurve
			c.fromMarks(&tc.marks, tc.total)
			for f, want := range tc.after {
				assert.InDelta(t, want, c.after(f), 1e-9, "after %.3f", f)
			}
		})
	}
}

// A cut whose shares denied nothing here (eu's demand, a quarter of the
// limit a window, stays under its half through the cut and the heal's
// hold) holds no key to the heal window's bounds: demand that comes after
// the hold spends up to the limit as it would without a cut. The same run
// with demand at the limit in the cut (eu denied at its half) is held to
// them: the window's even spread, at least half the limit and the slack.
// A fleet's cold start with region voices took a region not yet heard for
// cut off for a quarter of a second, and the heal window's bounds then
// held a hot key to what the node's lagging view said of the window.
func TestShareHealOfACutThatDeniedNothingHoldsNoKey(t *testing.T) {
	W := int64(10 * time.Second)
	for _, tc := range []struct {
		name    string
		every   int // eu's demand before the surge: a request every this many steps
		atLeast int // the heal window's admits
		atMost  int
	}{
		{"denied nothing", 4, 90, 101},
		{"denied in the cut", 1, 50, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admits, hw := healRun(t, 0.5, func(w int64, f float64) int {
				if w < 2 || w == 2 && f < 0.7 {
					if int(f*100+0.5)%tc.every == 0 {
						return 1
					}
					return 0
				}
				return 10
			})
			n := 0
			for _, at := range admits {
				if at >= hw*W && at < (hw+1)*W {
					n++
				}
			}
			t.Logf("admits in the heal window: %d", n)
			assert.GreaterOrEqual(t, n, tc.atLeast)
			assert.LessOrEqual(t, n, tc.atMost)
		})
	}
}
