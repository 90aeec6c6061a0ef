package gossip

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// TestLiveHotKey spreads one hot key over two regions of a real NATS
// super-cluster at 10x its limit (5x on each side) with no fault. The
// near-limit allowance keeps the fleet's trailing admitted count, measured
// at every admit over the rule's window, within 15 % of the limit, and the
// fleet still admits at least 85 % of the limit per window. The bound is
// taken over what one central node admits on the same arrival times when
// that is more (a stalled load generator bunches arrivals).
//
// Under the race detector, which slows decisions and the replication loop
// several times over and makes their timing irregular, the bound is 35 %:
// there, deferred admits bunch up and the next window's sliding estimate,
// which takes the previous window's admits as spread evenly, lets a few
// more through (1.02-1.20 measured, against 1.01-1.06 without it). Run with
// -v to see the figures.
func TestLiveHotKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of wall-clock time")
	}
	const (
		limit   = 200
		width   = time.Second
		perSide = 5 * limit // requests per window on each side
		windows = 4         // judged, after one to warm up
	)
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "api", Limit: limit, Window: width, Cost: 1, Scope: pop.ScopeGlobal}}
	opts := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
	nodes := startSCNodes(t, ctx, c, rules, opts, [2]int{0, 1}, [2]int{1, 1})

	var mu sync.Mutex
	var admits []int64 // decision times of admitted requests, both sides
	var who []int
	var arrivals []int64 // decision times of every request, both sides
	sent := 0
	// Traffic starts at a window boundary. A fresh key under load admits its
	// whole limit at once; mid-window, that burst is weighted as if spread
	// over the window by the sliding-window estimate of the next, so the
	// trailing count overshoots for a window whatever the replication (a
	// central limiter does the same): that is the estimator's error, not
	// what this test measures.
	start := time.Unix(0, (time.Now().UnixNano()/int64(width)+1)*int64(width))
	time.Sleep(time.Until(start)) // deliberate: the load starts at a window boundary
	end := start.Add((windows + 1) * width)
	driveHot(t, nodes, start, end, perSide, width, func(n *scNode, at int64, allowed bool) {
		mu.Lock()
		defer mu.Unlock()
		sent++
		arrivals = append(arrivals, at)
		if allowed {
			admits = append(admits, at)
			who = append(who, n.region)
		}
	})

	mu.Lock()
	defer mu.Unlock()
	type adm struct {
		at int64
		r  int
	}
	all := make([]adm, len(admits))
	for i := range admits {
		all[i] = adm{admits[i], who[i]}
	}
	slices.SortFunc(all, func(a, b adm) int { return int(a.at - b.at) })
	for i := range all {
		admits[i] = all[i].at
	}
	from := start.Add(width).UnixNano() // judge after the warm-up window
	worst, worstAt, judged := worstTrailing(admits, from, width)

	// The same arrivals decided by one central node, in the order they were
	// decided: what the sliding-window estimate gives without replication.
	// A stall of the load generators (a busy machine) bunches arrivals, and
	// the estimate, which takes the previous window's admits as spread
	// evenly, then admits more in a trailing window even centrally; the
	// fleet is judged against that, not against an even arrival rate.
	slices.Sort(arrivals)
	central, err := pop.New(pop.Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "central"}, Node: "central-1", Incarnation: 1}, Rules: rules})
	require.NoError(t, err)
	var centralAdmits []int64
	for _, at := range arrivals {
		d, err := central.Decide(at, "api", "hot", 1)
		require.NoError(t, err)
		if d.Allowed {
			centralAdmits = append(centralAdmits, at)
		}
	}
	centralWorst, _, _ := worstTrailing(centralAdmits, from, width)
	if worst > limit*115/100 {
		var b [2][20]int
		for _, a := range all {
			if k := (a.at - (worstAt - int64(2*width))) / int64(100*time.Millisecond); k >= 0 && k < 20 {
				b[a.r][k]++
			}
		}
		t.Logf("admits per 100ms over the two windows before the worst, by region: %v %v (worst at %.3f of its window)", b[0], b[1], float64(worstAt%int64(width))/float64(width))
	}
	span := float64(admits[len(admits)-1]-from) / float64(width)
	t.Logf("sent %d (%.1fx the limit per window), admitted %d in %.2f judged windows (%.3f x the limit per window), worst trailing window %d (%.3f x the limit; central on the same arrivals %d)",
		sent, float64(sent)/float64(windows+1)/limit, judged, span, float64(judged)/span/limit, worst, float64(worst)/limit, centralWorst)
	require.Greater(t, float64(sent)/float64(windows+1), 4.0*limit, "the load must be far over the limit for the test to mean anything")
	bound := 1.15
	if raceDetector {
		bound = 1.35
	}
	assert.LessOrEqual(t, float64(worst), bound*float64(max(limit, centralWorst)), "trailing admitted count over the limit (or over what one central node admits on the same arrivals)")
	assert.GreaterOrEqual(t, float64(judged)/span, 0.85*limit, "the fleet admits at least 85 % of the limit per window")
}

// worstTrailing returns the largest number of sorted admit times in any
// trailing window of width ending at an admit at or after from, when it
// ended, and how many admits ended at or after from.
func worstTrailing(admits []int64, from int64, width time.Duration) (worst int, worstAt int64, judged int) {
	lo := 0
	for hi, at := range admits {
		for admits[lo] <= at-int64(width) {
			lo++
		}
		if at >= from {
			judged++
			if hi-lo+1 > worst {
				worst = hi - lo + 1
				worstAt = at
			}
		}
	}
	return worst, worstAt, judged
}
