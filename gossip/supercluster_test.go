package gossip

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

type scNode struct {
	*member
	region int
}

// startSCNodes starts one single-node PoP per entry of pops ("region/pop"),
// connected to its region's server.
func startSCNodes(t testing.TB, ctx context.Context, c *gossiptest.SuperCluster, rules []pop.Rule, opts Options, pops ...[2]int) []*scNode {
	t.Helper()
	var out []*scNode
	var expected []identity.PoPID
	for _, rp := range pops {
		expected = append(expected, identity.PoPID{Region: c.Names[rp[0]], PoP: fmt.Sprintf("%s%d", c.Names[rp[0]], rp[1])})
	}
	for k, rp := range pops {
		id := expected[k]
		name := id.PoP + "-1"
		o := opts
		o.Global = NATSConnect(NATSConfig{Self: id, Name: name, URL: c.Servers[rp[0]].ClientURL(), ReconnectWait: 50 * time.Millisecond, PingInterval: time.Second})
		o.ExpectedPoPs = popNames(expected...)
		out = append(out, &scNode{member: startMember(t, ctx, newNode(t, id.Region, id.PoP, name, rules), o), region: rp[0]})
	}
	require.Eventually(t, func() bool {
		for _, n := range out {
			if len(n.rep.Partitioned()) != 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, poll, "every PoP hears every other")
	return out
}

// TestSuperClusterConvergence spreads traffic on one key over four PoPs in
// three regions linked by gateways; every view converges to the number of
// admitted requests. The time it takes is logged next to flush interval +
// measured RTT.
func TestSuperClusterConvergence(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us", "ap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := Options{Settings: repl.Settings{FlushInterval: 20 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
	nodes := startSCNodes(t, ctx, c, testRules(), opts, [2]int{0, 1}, [2]int{0, 2}, [2]int{1, 1}, [2]int{2, 1})
	rtt := measureRTT(t, c)
	rng := rand.New(rand.NewPCG(7, 7))
	var admitted uint64
	for round := range 5 {
		for range 200 {
			n := nodes[rng.IntN(len(nodes))]
			d, err := n.node.Decide(time.Now().UnixNano(), "api", "one-key", 1)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		start := time.Now()
		require.Eventually(t, func() bool {
			for _, n := range nodes {
				if total(n.node, "api", "one-key") != admitted {
					return false
				}
			}
			return true
		}, 20*time.Second, poll, "views converge")
		t.Logf("round %d: %d admitted; converged in %s (flush interval %s + gateway RTT %s)",
			round, admitted, time.Since(start).Round(time.Millisecond), opts.FlushInterval, rtt.Round(time.Microsecond))
	}
	for _, n := range nodes {
		st := n.rep.Stats()[0]
		assert.Zero(t, st.Rejected, n.name)
		assert.Zero(t, st.DecodeErrors, n.name)
	}
}

// measureRTT measures the round trip of a message across a gateway: a
// request from region 0 answered in the last region.
func measureRTT(t testing.TB, c *gossiptest.SuperCluster) time.Duration {
	t.Helper()
	far, err := nats.Connect(c.Servers[len(c.Servers)-1].ClientURL())
	require.NoError(t, err)
	defer far.Close()
	sub, err := far.Subscribe("rtt.probe", func(m *nats.Msg) { _ = m.Respond(nil) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, far.Flush())
	near, err := nats.Connect(c.Servers[0].ClientURL())
	require.NoError(t, err)
	defer near.Close()
	var rtts []time.Duration
	require.Eventually(t, func() bool {
		start := time.Now()
		if _, err := near.Request("rtt.probe", nil, time.Second); err == nil {
			rtts = append(rtts, time.Since(start))
		}
		return len(rtts) >= 20
	}, 10*time.Second, poll, "rtt probes")
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts[len(rtts)/2]
}

// TestSuperClusterPartition cuts region "ap" off by its gateway links. Both
// sides keep deciding; the overshoot over the limit is logged. After heal
// every view converges to the exact total admitted.
func TestSuperClusterPartition(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us", "ap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const limit = 300
	rules := []pop.Rule{{Name: "api", Limit: limit, Window: time.Hour, Cost: 1, Scope: pop.ScopeGlobal}}
	// A peer timeout well above a loaded 2-core machine's scheduling stalls
	// under -race, so that the connected side never looks cut itself.
	opts := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
	nodes := startSCNodes(t, ctx, c, rules, opts, [2]int{0, 1}, [2]int{1, 1}, [2]int{2, 1})
	admittedBy := make([]uint64, len(nodes))
	decide := func(n int, times int) {
		for range times {
			d, err := nodes[n].node.Decide(time.Now().UnixNano(), "api", "k", 1)
			require.NoError(t, err)
			if d.Allowed {
				admittedBy[n]++
			}
		}
	}
	sum := func() (s uint64) {
		for _, a := range admittedBy {
			s += a
		}
		return s
	}
	converged := func() bool {
		for _, n := range nodes {
			if total(n.node, "api", "k") != sum() {
				return false
			}
		}
		return true
	}
	for i := range nodes {
		decide(i, 50)
	}
	require.Eventually(t, converged, 20*time.Second, poll, "healthy convergence")

	c.Cut(2, true)
	var logged time.Time
	require.Eventually(t, func() bool {
		ok := len(nodes[0].rep.Partitioned()) == 1 && len(nodes[1].rep.Partitioned()) == 1 && len(nodes[2].rep.Partitioned()) == 2
		if !ok && time.Since(logged) >= 500*time.Millisecond {
			// What each node has heard of the others, twice a second: the
			// age of each remote PoP's last message and whether it counts
			// as partitioned.
			logged = time.Now()
			var sb strings.Builder
			for _, n := range nodes {
				sb.WriteString(" " + n.name + ":")
				for _, p := range n.rep.RemotePoPs() {
					fmt.Fprintf(&sb, " %s age %v partitioned %v;", p.PoPID, p.Age.Round(time.Millisecond), p.Partitioned)
				}
			}
			t.Logf("%s:%s", logged.Format("15:04:05.000"), sb.String())
		}
		return ok
	}, 20*time.Second, poll, "partition detected on both sides")
	assert.Equal(t, []identity.PoPID{{Region: "ap", PoP: "ap1"}}, nodes[0].rep.Partitioned())
	before := sum()
	// Both sides keep deciding: the majority side fills the limit by its own
	// view, and so does the cut-off region.
	for round := 0; round < 10; round++ {
		for i := range nodes {
			decide(i, 40)
		}
		// Pace the traffic: let a flush go out before the next round, so the
		// connected side sees part of its own spending as it goes.
		f := nodes[0].rep.Status().Protocol.Flushes
		require.Eventually(t, func() bool { return nodes[0].rep.Status().Protocol.Flushes > f+1 }, 5*time.Second, poll, "a flush")
	}
	during := sum() - before
	t.Logf("partition: admitted %d before, %d during the cut, %d in all against limit %d: overshoot %d (%.2fx the limit)",
		before, during, sum(), limit, int64(sum())-limit, float64(sum())/limit)
	assert.Greater(t, admittedBy[2], uint64(50), "the cut-off region keeps deciding")
	assert.Greater(t, admittedBy[0]+admittedBy[1], uint64(100), "the connected side keeps deciding")

	c.Cut(2, false)
	require.Eventually(t, converged, 30*time.Second, poll, "views converge to the exact totals after heal")
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if len(n.rep.Partitioned()) != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, poll, "every PoP heard again")
	for _, n := range nodes {
		assert.Equal(t, sum(), total(n.node, "api", "k"), n.name)
	}
}

// driveHot decides key "hot" of rule "api" on each node, perSide times per
// width, evenly from start to end (catching up with the target rate
// however coarse the ticks), and hands every decision to record, which
// runs on the nodes' goroutines and must lock what it writes. It returns
// when every node is done.
func driveHot(t *testing.T, nodes []*scNode, start, end time.Time, perSide int, width time.Duration, record func(n *scNode, at int64, allowed bool)) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			done := 0
			for now := range tick.C {
				if now.After(end) {
					return
				}
				due := int(float64(perSide) * float64(now.Sub(start)) / float64(width))
				for ; done < due; done++ {
					at := time.Now().UnixNano()
					d, err := n.node.Decide(at, "api", "hot", 1)
					if err != nil {
						t.Error(err)
						return
					}
					record(n, at, d.Allowed)
				}
			}
		}()
	}
	wg.Wait()
}
