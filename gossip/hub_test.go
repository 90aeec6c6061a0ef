package gossip_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/memhub"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// TestHubConvergence runs three PoPs of two nodes each over a Hub that
// drops, duplicates, delays and reorders; every view must reach the exact
// total of admitted requests. Inside a PoP a member's last counts go out
// three times (its flush, then two anti-entropy rounds after they settle);
// a fifth of the deliveries dropped, all three were lost now and then under
// load (a member's view of its mate 79 behind, for good), and what repairs
// them is memberlist's periodic push/pull, which the Hub does too.
func TestHubConvergence(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	hub := memhub.New(seed)
	defer hub.Close()
	hub.SetFaults(memhub.Faults{Drop: 0.2, Duplicate: 0.2, MinDelay: 0, MaxDelay: 5 * time.Millisecond})
	hub.SetPushPull(500 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := gossip.Options{Settings: repl.Settings{FlushInterval: 5 * time.Millisecond, AntiEntropyInterval: 50 * time.Millisecond, PeerTimeout: 200 * time.Millisecond}}
	var ms []*member
	for _, p := range []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}} {
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", p.PoP, i)
			o := opts
			o.PoP = hub.PoP(p, name)
			o.Global = hub.Global(p, name)
			ms = append(ms, startMember(t, ctx, newNode(t, p.Region, p.PoP, name, testRules()), o))
		}
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	admitted := map[string]uint64{}
	perIP := map[identity.PoPID]uint64{}
	for range 3000 {
		m := ms[rng.IntN(len(ms))]
		d, err := m.node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted["k"]++
		}
		d, err = m.node.Decide(time.Now().UnixNano(), "per-ip", "ip", 1)
		require.NoError(t, err)
		if d.Allowed {
			perIP[m.id]++
		}
	}
	if !assert.Eventually(t, func() bool {
		for _, m := range ms {
			if total(m.node, "api", "k") != admitted["k"] || total(m.node, "per-ip", "ip") != perIP[m.id] {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "hub convergence") {
		// What each view holds, for the seed above.
		for _, m := range ms {
			v, err := m.node.View(time.Now().UnixNano(), "api", "k")
			t.Logf("%s: api/k %d of %d, per-ip %d of %d, members %v, partitioned %v, view %+v (%v)", m.name,
				total(m.node, "api", "k"), admitted["k"], total(m.node, "per-ip", "ip"), perIP[m.id],
				m.rep.Members(), m.rep.Partitioned(), v, err)
		}
		t.FailNow()
	}
	for _, m := range ms {
		assert.Len(t, m.rep.Members(), 1, m.name)
		assert.Empty(t, m.rep.Partitioned(), m.name)
	}
}

// TestHubPartition cuts one PoP off: its peers count it as partitioned
// (b expects none: a counts because its counts were merged); after heal,
// views converge to the exact totals.
func TestHubPartition(t *testing.T) {
	hub := memhub.New(1)
	defer hub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := gossip.Options{Settings: repl.Settings{FlushInterval: 5 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: 100 * time.Millisecond}}
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	o := opts
	o.Global = hub.Global(a, "a")
	o.ExpectedPoPs = popNames(b)
	var mu sync.Mutex
	var reports [][]identity.PoPID
	o.OnPartitionChange = func(p []identity.PoPID) {
		mu.Lock()
		reports = append(reports, p)
		mu.Unlock()
	}
	lastReport := func(want []identity.PoPID) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(reports) > 0 && slices.Equal(reports[len(reports)-1], want)
		}
	}
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "a", testRules()), o)
	o = opts
	o.Global = hub.Global(b, "b")
	mb := startMember(t, ctx, newNode(t, b.Region, b.PoP, "b", testRules()), o)
	require.Eventually(t, func() bool {
		return len(ma.rep.Heard()) == 1 && len(mb.rep.Heard()) == 1
	}, 5*time.Second, poll, "both heard")
	// Traffic on both sides before the cut: a PoP without expected PoPs
	// counts another as partitioned only once it has merged its counts.
	for _, m := range []*member{ma, mb} {
		_, err := m.node.Decide(time.Now().UnixNano(), "api", "before", 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "before") == 2 && total(mb.node, "api", "before") == 2
	}, 5*time.Second, poll, "counts merged")
	hub.Cut(a, b)
	require.Eventually(t, func() bool {
		return len(ma.rep.Partitioned()) == 1 && len(mb.rep.Partitioned()) == 1
	}, 5*time.Second, poll, "partition seen")
	assert.Equal(t, []identity.PoPID{b}, ma.rep.Partitioned())
	require.Eventually(t, lastReport([]identity.PoPID{b}), 5*time.Second, poll, "the cut reported")
	for range 10 {
		_, err := ma.node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
		_, err = mb.node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
	}
	// Counts flushed during the cut are lost; nothing changes after heal, so
	// only the resync on "heard again" can repair them.
	fa, fb := ma.rep.Status().Protocol.Flushes, mb.rep.Status().Protocol.Flushes
	require.Eventually(t, func() bool {
		return ma.rep.Status().Protocol.Flushes > fa+1 && mb.rep.Status().Protocol.Flushes > fb+1
	}, 5*time.Second, poll, "flushed during the cut")
	assert.Equal(t, uint64(10), total(ma.node, "api", "k"))
	hub.Heal()
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 20 && total(mb.node, "api", "k") == 20
	}, 5*time.Second, poll, "healed views")
	require.Eventually(t, func() bool { return len(ma.rep.Partitioned()) == 0 }, 5*time.Second, poll, "heard again")
	require.Eventually(t, lastReport(nil), 5*time.Second, poll, "the heal reported")
	mu.Lock()
	defer mu.Unlock()
	// b heard (after being expected but unheard, if the first check came
	// before b's first heartbeat), b cut, b back; each change once.
	if len(reports) == 4 {
		assert.Equal(t, []identity.PoPID{b}, reports[0])
		reports = reports[1:]
	}
	assert.Equal(t, [][]identity.PoPID{nil, {b}, nil}, reports)
}

// TestHubShortCut cuts two PoPs apart for less than PeerTimeout: nobody
// counts as partitioned, but the missed heartbeats make both sides resend,
// so the counts flushed during the cut arrive without waiting for the
// periodic anti-entropy (an hour here).
func TestHubShortCut(t *testing.T) {
	hub := memhub.New(2)
	defer hub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := gossip.Options{Settings: repl.Settings{FlushInterval: 5 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Hour, HeartbeatInterval: 10 * time.Millisecond}}
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	o := opts
	o.Global = hub.Global(a, "a")
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "a", testRules()), o)
	o = opts
	o.Global = hub.Global(b, "b")
	mb := startMember(t, ctx, newNode(t, b.Region, b.PoP, "b", testRules()), o)
	require.Eventually(t, func() bool { return len(ma.rep.Heard()) == 1 && len(mb.rep.Heard()) == 1 }, 5*time.Second, poll, "both heard")
	hub.Cut(a, b)
	for _, m := range []*member{ma, mb} {
		for range 5 {
			_, err := m.node.Decide(time.Now().UnixNano(), "api", "k", 1)
			require.NoError(t, err)
		}
	}
	// Several heartbeats and the flush go into the cut.
	sa, sb := ma.rep.Stats()[0].MessagesSent, mb.rep.Stats()[0].MessagesSent
	require.Eventually(t, func() bool {
		return ma.rep.Stats()[0].MessagesSent > sa+4 && mb.rep.Stats()[0].MessagesSent > sb+4
	}, 5*time.Second, poll, "heartbeats lost in the cut")
	hub.Heal()
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 10 && total(mb.node, "api", "k") == 10
	}, 5*time.Second, poll, "repaired after a short cut")
	assert.Empty(t, ma.rep.Partitioned())
}

// TestHubRestartLonePoP: the same over the Hub, with loss.
func TestHubRestartLonePoP(t *testing.T) {
	hub := memhub.New(3)
	defer hub.Close()
	hub.SetFaults(memhub.Faults{Drop: 0.1, MaxDelay: 2 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := gossip.Options{Settings: repl.Settings{FlushInterval: 5 * time.Millisecond, AntiEntropyInterval: 50 * time.Millisecond, PeerTimeout: 200 * time.Millisecond}}
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	start := func(id identity.PoPID) *member {
		o := opts
		o.Global = hub.Global(id, id.PoP+"-1")
		return startMember(t, ctx, newNode(t, id.Region, id.PoP, id.PoP+"-1", testRules()), o)
	}
	ma, mb := start(a), start(b)
	for range 10 {
		_, err := mb.node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return total(ma.node, "api", "k") == 10 }, 5*time.Second, poll, "a has b's counts")
	require.NoError(t, mb.rep.Close())
	mb2 := start(b)
	require.Eventually(t, func() bool { return total(mb2.node, "api", "k") == 10 }, 5*time.Second, poll, "relayed back to the new incarnation")
}
