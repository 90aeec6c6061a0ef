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

// TestLiveGCRASpendCrossesRegions: a key of a global gcra rule that spends
// its burst in one region of a real NATS super-cluster is paced in the
// other once that spend has arrived there: denied, with the retry-after
// its TAT gives, although it never saw the key before.
func TestLiveGCRASpendCrossesRegions(t *testing.T) {
	const (
		limit  = 12
		window = time.Minute // one request every 5 s, 12 at once
	)
	interval := int64(window / limit)
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "pace", Limit: limit, Window: window, Cost: 1, Scope: pop.ScopeGlobal, Algorithm: pop.GCRA}}
	opts := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
	nodes := startSCNodes(t, ctx, c, rules, opts, [2]int{0, 1}, [2]int{1, 1})
	eu, us := nodes[0].node, nodes[1].node

	at := time.Now().UnixNano()
	for i := range limit {
		d, err := eu.Decide(at, "pace", "client", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d of the burst", i+1)
	}
	d, err := eu.Decide(at, "pace", "client", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed, "the burst is spent where it was spent")
	assert.Equal(t, time.Duration(interval), d.RetryAfter, "one interval until the next request fits")

	// The other region has never seen the key; once eu's admissions have
	// arrived (counted in its view), its own TAT holds them.
	var v pop.KeyView
	require.Eventually(t, func() bool {
		v, err = us.View(time.Now().UnixNano(), "pace", "client")
		require.NoError(t, err)
		var sum uint64
		for _, w := range v.Windows {
			sum += w.Total
		}
		return sum == limit
	}, 10*time.Second, poll, "eu's spend reaches us")
	now := time.Now().UnixNano()
	v, err = us.View(now, "pace", "client")
	require.NoError(t, err)
	require.Greater(t, v.TAT, now+(limit-1)*interval, "us paces the whole burst it merged (TAT %d, now %d)", v.TAT, now)
	d, err = us.Decide(now, "pace", "client", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the key is paced in us")
	assert.Equal(t, time.Duration(v.TAT+interval-limit*interval-now), d.RetryAfter, "retry-after from us's TAT")
	assert.Positive(t, d.RetryAfter)
	assert.LessOrEqual(t, d.RetryAfter, time.Duration(interval))
	d, err = us.Decide(now+int64(d.RetryAfter), "pace", "client", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "admitted once its retry-after has passed")
}

// TestLiveGCRAFleetPace sends one key of a global gcra rule at 5x its rate
// on each side of a real two-region NATS super-cluster for a few seconds.
// The fleet's admitted count in any trailing window stays within the
// stated bound: what one central node admits on the same arrival times
// (limit + burst at most), plus what is in flight between the regions —
// the burst each side may spend before it hears the other's, and the pace
// over the replication delay (taken as 200 ms: flush 10 ms, loopback
// latency, and a busy machine's stalls; 500 ms under the race detector).
// The fleet also admits at least 80 % of what the central node does. Run
// with -v to see the figures.
func TestLiveGCRAFleetPace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of wall-clock time")
	}
	const (
		limit   = 100
		burst   = 20
		width   = time.Second
		perSide = 5 * limit // requests per window on each side
		windows = 4
	)
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "api", Limit: limit, Window: width, Cost: 1, Burst: burst, Scope: pop.ScopeGlobal, Algorithm: pop.GCRA}}
	opts := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
	nodes := startSCNodes(t, ctx, c, rules, opts, [2]int{0, 1}, [2]int{1, 1})

	var mu sync.Mutex
	var admits, arrivals []int64 // decision times, both sides
	start := time.Now()
	end := start.Add(windows * width)
	driveHot(t, nodes, start, end, perSide, width, func(n *scNode, at int64, allowed bool) {
		mu.Lock()
		defer mu.Unlock()
		arrivals = append(arrivals, at)
		if allowed {
			admits = append(admits, at)
		}
	})

	mu.Lock()
	defer mu.Unlock()
	slices.Sort(admits)
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
	from := start.UnixNano()
	worst, _, _ := worstTrailing(admits, from, width)
	centralWorst, _, _ := worstTrailing(centralAdmits, from, width)
	delay := 200 * time.Millisecond
	if raceDetector {
		delay = 500 * time.Millisecond
	}
	inFlight := burst + int(int64(limit)*int64(delay)/int64(width))
	t.Logf("sent %d (%.1fx the rate), fleet admitted %d (central %d on the same arrivals); worst trailing window %d (central %d, limit + burst %d, bound %d)",
		len(arrivals), float64(len(arrivals))/windows/limit, len(admits), len(centralAdmits), worst, centralWorst, limit+burst, max(limit+burst, centralWorst)+inFlight)
	require.Greater(t, len(arrivals), 4*windows*limit, "the load must be far over the rate for the test to mean anything")
	assert.LessOrEqual(t, centralWorst, limit+burst, "one exact GCRA admits at most limit + burst in a window")
	assert.LessOrEqual(t, worst, max(limit+burst, centralWorst)+inFlight, "fleet's trailing admitted count within limit + burst + in flight")
	assert.LessOrEqual(t, len(admits), len(centralAdmits)+inFlight, "fleet's admitted total within the central one's + in flight")
	assert.GreaterOrEqual(t, float64(len(admits)), 0.8*float64(len(centralAdmits)), "the fleet admits at least 80 % of what one central node does")
}
