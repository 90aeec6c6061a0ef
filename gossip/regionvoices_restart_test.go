package gossip

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// startRVNode starts node name of PoP id (a PoP of one node) in region
// index region of c with region voices on, expecting the PoPs expected and
// waiting at most startupSync at start for their counts.
func startRVNode(t *testing.T, ctx context.Context, c *gossiptest.SuperCluster, region int, id identity.PoPID, name string, startupSync time.Duration, expected []identity.PoPID) *rvNode {
	t.Helper()
	node := newNode(t, id.Region, id.PoP, name, testRules())
	o := Options{Settings: repl.Settings{FlushInterval: 20 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second,
		RegionVoices: new(true), StartupSync: startupSync, ExpectedPoPs: popNames(expected...)}}
	tap := &recvTap{own: id.Region, counts: map[tapKey]int{}, froms: map[identity.PoPID]bool{}}
	connect := NATSConnect(NATSConfig{Self: id, Name: name, URL: c.ClientURL(region), ReconnectWait: 50 * time.Millisecond, PingInterval: time.Second, RegionVoices: true})
	o.Global = func(h Handler) (Transport, error) {
		tap.Handler = h
		return connect(tap)
	}
	return &rvNode{member: startMember(t, ctx, node, o), region: region, tap: tap}
}

func decideN(t *testing.T, n *rvNode, key string, times int) {
	t.Helper()
	for range times {
		d, err := n.node.Decide(time.Now().UnixNano(), "api", key, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
}

// restartLoneRegion counts 30 on a global key over region eu's PoP and
// region us's only PoP of one node, restarts us's node with a startup sync
// and returns the new incarnation once the sync reports synced.
func restartLoneRegion(t *testing.T) (eu, us2 *rvNode) {
	t.Helper()
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nodes := startRVNodes(t, ctx, c, true, 20*time.Millisecond, rvPoP{0, "eu1", 1}, rvPoP{1, "us1", 1})
	waitVoices(t, nodes)
	eu, us := nodes[0], nodes[1]
	decideN(t, eu, "k", 20)
	decideN(t, us, "k", 10)
	require.Eventually(t, func() bool { return total(eu.node, "api", "k") == 30 && total(us.node, "api", "k") == 30 }, 10*time.Second, poll, "converged")

	require.NoError(t, us.rep.Close())
	us2 = startRVNode(t, ctx, c, 1, us.id, us.name, 5*time.Second, []identity.PoPID{eu.id, us.id})
	require.Eventually(t, func() bool { return us2.rep.Status().Startup.Synced }, 10*time.Second, poll, "startup sync")
	require.False(t, us2.rep.Status().Startup.TimedOut)
	return eu, us2
}

// TestRegionVoicesRestartLoneRegion restarts the only node of the only PoP
// of a region: the other regions hold its counts only inside its region's
// total, which they relay back to it under the former region epoch, so the
// new incarnation counts what the former one admitted.
func TestRegionVoicesRestartLoneRegion(t *testing.T) {
	eu, us2 := restartLoneRegion(t)
	require.Eventually(t, func() bool { return total(us2.node, "api", "k") == 30 }, 10*time.Second, poll,
		"the restarted node counts what its former incarnation admitted")
	assert.EqualValues(t, 30, total(eu.node, "api", "k"))
}

// TestRegionVoicesRestartLoneRegionSynced: once the startup sync of the
// restarted node of a lone region reports synced (and /readyz says ready),
// it holds what its former incarnation admitted (10), as it does with
// region voices off (its PoP's former total, relayed back before the
// others' markers).
func TestRegionVoicesRestartLoneRegionSynced(t *testing.T) {
	_, us2 := restartLoneRegion(t)
	v, err := us2.node.View(time.Now().UnixNano(), "api", "k")
	require.NoError(t, err)
	var own uint64
	for _, w := range v.Windows {
		for r, n := range w.Replicas {
			if strings.HasPrefix(r, "us/") {
				own += n
			}
		}
	}
	assert.EqualValues(t, 10, own, "once synced, the node holds its former incarnation's counts: %v", v.Windows)
}

// TestRegionVoicesRelayNoDoubleCount restarts a PoP of region eu (a new
// PoP epoch; its former totals stay live at eu's other PoP), then lets a
// node of region us ask every PoP for its counts, as it does when its NATS
// connection comes back: what eu's PoPs relay to it must not count eu2's
// former PoP totals a second time, on top of eu's region total that
// already sums them.
func TestRegionVoicesRelayNoDoubleCount(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := startRVNodes(t, ctx, c, true, 20*time.Millisecond, rvPoP{0, "eu1", 1}, rvPoP{0, "eu2", 1}, rvPoP{1, "us1", 1})
	waitVoices(t, nodes)
	eu1, eu2, us := nodes[0], nodes[1], nodes[2]
	decideN(t, eu1, "k", 5)
	decideN(t, eu2, "k", 7)
	all := func(want uint64, ns ...*rvNode) func() bool {
		return func() bool {
			for _, n := range ns {
				if total(n.node, "api", "k") != want {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, all(12, eu1, eu2, us), 10*time.Second, poll, "converged")

	require.NoError(t, eu2.rep.Close())
	eu2b := startRVNode(t, ctx, c, 0, eu2.id, eu2.name, 5*time.Second, []identity.PoPID{eu1.id, eu2.id, us.id})
	require.Eventually(t, func() bool { return eu2b.rep.Status().Startup.Synced }, 10*time.Second, poll, "eu2's startup sync")
	require.Eventually(t, all(12, eu1, eu2b, us), 10*time.Second, poll, "converged after eu2's restart")
	epochKnown := func(n *rvNode) bool {
		for _, p := range n.rep.RemotePoPs() {
			if p.PoPID == eu2.id && p.Epoch == eu2b.rep.Status().Epoch {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return epochKnown(eu1) && epochKnown(us) }, 10*time.Second, poll, "eu2's new epoch known")

	// Two heartbeat intervals on (more than SyncInterval since the relays
	// eu2's restart asked for: the next one is not deferred), us's NATS
	// connection comes back: it asks the others for their counts.
	hb0 := us.tap.heartbeats(eu1.id)
	require.Eventually(t, func() bool { return us.tap.heartbeats(eu1.id) > hb0+2 }, 10*time.Second, poll, "two heartbeat intervals")
	st := eu1.rep.Status().Protocol
	answers, deferred, relays := st.SyncAnswers, st.RelaysDeferred, st.Relays
	(&handler{r: us.rep, t: tGlobal}).Resync()
	require.Eventually(t, func() bool { return eu1.rep.Status().Protocol.SyncAnswers > answers }, 10*time.Second, poll, "eu1 answers")
	// eu1 relays at once, or once its pace allows when it deferred the
	// relay; its next heartbeats, on the same connection, arrive after what
	// it relayed.
	if eu1.rep.Status().Protocol.RelaysDeferred > deferred {
		require.Eventually(t, func() bool { return eu1.rep.Status().Protocol.Relays > relays }, 10*time.Second, poll, "eu1's deferred relay")
	}
	hb := us.tap.heartbeats(eu1.id)
	require.Eventually(t, func() bool { return us.tap.heartbeats(eu1.id) > hb+1 }, 10*time.Second, poll, "eu1's heartbeats after its answer")
	// And a message queued behind them at us is applied after them.
	errs := globalStats(us.rep.Status()).DecodeErrors
	(&handler{r: us.rep, t: tGlobal}).Receive(eu1.id, KindDelta, []byte{0xc1})
	require.Eventually(t, func() bool { return globalStats(us.rep.Status()).DecodeErrors > errs }, 10*time.Second, poll, "us applied what arrived")

	v, err := us.node.View(time.Now().UnixNano(), "api", "k")
	require.NoError(t, err)
	for _, w := range v.Windows {
		for r := range w.Replicas {
			rep, err := identity.ParseReplica(r)
			require.NoError(t, err)
			assert.True(t, rep.Region == "us" || rep.IsRegion(), "us holds %s: a PoP total of region eu, which eu's region total already sums (%v)", r, w.Replicas)
		}
	}
	assert.EqualValues(t, 12, total(us.node, "api", "k"), "eu's counts once")
}
