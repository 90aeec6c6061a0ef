package gossip

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// TestLivePartitionPolicies cuts the gateway links between two regions of a
// real NATS super-cluster for several windows while both sides keep sending
// traffic at 2.5x the limit each. With share, every window wholly inside the
// cut admits at most 5 % over the limit across both sides; with keep, the
// sides together admit far more.
func TestLivePartitionPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of wall-clock time")
	}
	for _, tc := range []struct {
		policy pop.Policy
		check  func(t *testing.T, worst float64)
	}{
		{pop.Share, func(t *testing.T, worst float64) {
			assert.LessOrEqual(t, worst, 1.05, "share: at most 5 % over the limit per window during the cut")
		}},
		{pop.Keep, func(t *testing.T, worst float64) {
			assert.Greater(t, worst, 1.5, "keep: each side spends the limit on its own")
		}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			worst := runLiveCut(t, tc.policy)
			tc.check(t, worst)
		})
	}
}

func runLiveCut(t *testing.T, policy pop.Policy) float64 {
	const (
		limit  = 200
		width  = time.Second
		period = 4 * time.Millisecond // 250 requests/s per side: 2.5x the limit
	)
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "api", Limit: limit, Window: width, Cost: 1, Scope: pop.ScopeGlobal, OnPartition: policy}}
	var parts partitionLog
	opts := parts.hook(Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: 40 * time.Millisecond}})
	nodes := startSCNodes(t, ctx, c, rules, opts, [2]int{0, 1}, [2]int{1, 1})

	var mu sync.Mutex
	admitted := map[int64]int{} // by window index, both sides
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				now := time.Now().UnixNano()
				d, err := n.node.Decide(now, "api", "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted[now/int64(width)]++
					mu.Unlock()
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	idx := func() int64 { return time.Now().UnixNano() / int64(width) }
	// Two healthy windows, so that both sides know the key's traffic, the
	// last of them seen whole by both sides: the shares are taken from it.
	start := idx()
	require.Eventually(t, func() bool {
		w := idx()
		return w >= start+2 && parts.sawWhole(time.Unix(0, (w-1)*int64(width)))
	}, 30*time.Second, poll, "a window seen whole by both sides")

	c.Cut(1, true)
	require.Eventually(t, func() bool {
		return len(nodes[0].rep.Partitioned()) == 1 && len(nodes[1].rep.Partitioned()) == 1
	}, 10*time.Second, poll, "both sides notice the cut")
	require.Eventually(t, func() bool {
		now := time.Now().UnixNano()
		return nodes[0].node.Partition(now).Partitioned && nodes[1].node.Partition(now).Partitioned
	}, 10*time.Second, poll, "both node cores told")
	// Judge the windows that begin after the cut was noticed.
	first := idx() + 1
	require.Eventually(t, func() bool { return idx() >= first+4 }, 20*time.Second, poll, "four windows of cut")
	last := idx() - 1
	c.Cut(1, false)
	require.Eventually(t, func() bool {
		return len(nodes[0].rep.Partitioned()) == 0 && len(nodes[1].rep.Partitioned()) == 0
	}, 20*time.Second, poll, "every PoP heard again")

	mu.Lock()
	defer mu.Unlock()
	worst := 0.0
	for w := first; w <= last; w++ {
		r := float64(admitted[w]) / limit
		t.Logf("%s: window %d of the cut: admitted %d across both sides (%.3f x the limit)", policy, w-first, admitted[w], r)
		worst = max(worst, r)
	}
	return worst
}
