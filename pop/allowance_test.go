package pop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

const ms = int64(time.Millisecond)

// fleetResult is what runFleet measured.
type fleetResult struct {
	maxRatio          float64 // highest exact trailing admitted / limit
	admitted, central int
}

// runFleet drives n single-node PoPs deciding one key at rate requests per
// millisecond each (about 160x the limit's rate), flushing every 10ms, with
// every PoP total reaching the others 30ms after its flush, for 5 windows of
// 1s; a central node decides the same requests. split turns the near-limit
// allowance on, with the lag as its horizon.
func runFleet(t *testing.T, n, rate int, split bool) fleetResult {
	t.Helper()
	const limit, lat, flush = 100, 30 * ms, 10 * ms
	W := int64(time.Second)
	rules := []Rule{{Name: "api", Limit: limit, Window: time.Second, Cost: 1, Scope: ScopeGlobal}}
	nodes := make([]*Node, n)
	for i := range nodes {
		nd, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "r", PoP: "p" + string(rune('a'+i))}, Node: "x", Incarnation: 1}, Rules: rules, Seed: uint64(i + 1)})
		require.NoError(t, err)
		nd.Link().SetEpoch(1)
		if split {
			nd.Link().SetAllowance(ScopeGlobal, Allowance{Horizon: time.Duration(lat), Members: 1, PoPs: n})
		}
		nodes[i] = nd
	}
	central, err := New(Config{Self: replica("central", 1), Rules: rules, Seed: 99})
	require.NoError(t, err)
	type msg struct {
		at int64
		to int
		d  wire.Delta
	}
	var queue []msg // FIFO: every message takes lat
	var admits []int64
	var res fleetResult
	start := (t0/W + 1) * W
	for step := int64(0); step < 5*W/ms; step++ {
		now := start + step*ms
		for len(queue) > 0 && queue[0].at <= now {
			nodes[queue[0].to].Link().Apply(now, &queue[0].d, ScopeGlobal)
			queue = queue[1:]
		}
		for range rate {
			for _, nd := range nodes {
				if d, err := nd.Decide(now, "api", "k", 1); err == nil && d.Allowed {
					admits = append(admits, now)
					res.admitted++
				}
				if d, err := central.Decide(now, "api", "k", 1); err == nil && d.Allowed {
					res.central++
				}
			}
		}
		for len(admits) > 0 && admits[0] <= now-W {
			admits = admits[1:]
		}
		res.maxRatio = max(res.maxRatio, float64(len(admits))/limit)
		if step%(flush/ms) == 0 {
			for i, nd := range nodes {
				b := nd.Link().Flush(now, nil)
				if len(b.PoP.Entries) == 0 {
					continue
				}
				for j := range nodes {
					if j != i {
						queue = append(queue, msg{at: now + lat, to: j, d: b.PoP})
					}
				}
			}
		}
	}
	return res
}

// Without the allowance every node spends what it sees during the lag: the
// fleet overshoots by the rate times the lag times the nodes. With it the
// fleet's unseen admits add up to the headroom, plus at most one request
// per node, and the fleet admits about what one central node does.
func TestAllowanceHoldsFleetAtLimit(t *testing.T) {
	for _, n := range []int{2, 8} {
		free := runFleet(t, n, 2, false)
		split := runFleet(t, n, 2, true)
		t.Logf("%d nodes: free %+v, split %+v", n, free, split)
		assert.Greater(t, free.maxRatio, 1.5, "the lag shows without the allowance")
		assert.LessOrEqual(t, split.maxRatio, 1+float64(n)/100, "n nodes: at most n-1 requests over the limit")
		assert.GreaterOrEqual(t, float64(split.admitted), 0.95*float64(split.central), "over-restricting is a failure too")
		assert.LessOrEqual(t, split.admitted, split.central+5*n, "at most n-1 over the limit per window")
	}
}

// The allowance is set per scope: node-scope rules are never split, and
// fewer than two replicas or a zero horizon turn it off.
func TestSetAllowanceScopes(t *testing.T) {
	n := newNode(t, replica("a", 1))
	a := Allowance{Horizon: 100 * time.Millisecond, Members: 2, PoPs: 5}
	n.Link().SetAllowance(ScopeNode, a)
	n.Link().SetAllowance(ScopeGlobal, a)
	assert.Equal(t, Allowance{}, n.Link().AllowanceOf(ScopeNode))
	assert.Equal(t, Allowance{}, n.Link().AllowanceOf(ScopePoP))
	assert.Equal(t, a, n.Link().AllowanceOf(ScopeGlobal))
	assert.Equal(t, a.Horizon.Nanoseconds(), n.flushHorizon())
	n.Link().SetAllowance(ScopePoP, Allowance{Horizon: time.Second, Members: 1, PoPs: 1})
	assert.Equal(t, Allowance{}, n.Link().AllowanceOf(ScopePoP), "alone: off")
	n.Link().SetAllowance(ScopeGlobal, Allowance{Members: 2, PoPs: 5})
	assert.Equal(t, Allowance{}, n.Link().AllowanceOf(ScopeGlobal), "no lag: off")

	// A node-scope rule (limit 5) is never split, whatever the others do.
	n.Link().SetAllowance(ScopePoP, a)
	n.Link().SetAllowance(ScopeGlobal, a)
	for i := range 5 {
		d, err := n.Decide(t0, "local", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i)
	}
}

// settle makes n a node that has decided rule's keys for a window (its
// allowance reads the trailing rate over a window, as in a running fleet,
// not as at a cold start): one decision of another key a window before t0.
func settle(t *testing.T, n *Node, rule string, window time.Duration) {
	t.Helper()
	_, err := n.Decide(t0-int64(window), rule, "settle", 1)
	require.NoError(t, err)
}

// A member's count limits a pop-scope key's share; the split needs no
// other PoP.
func TestAllowanceSplitsPoPScope(t *testing.T) {
	rules := []Rule{{Name: "per-ip", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopePoP}}
	n, err := New(Config{Self: replica("a", 1), Rules: rules})
	require.NoError(t, err)
	n.Link().SetAllowance(ScopePoP, Allowance{Horizon: time.Millisecond, Members: 4, PoPs: 1})
	settle(t, n, "per-ip", 10*time.Second)
	member := wire.Delta{Sender: replica("b", 1), Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: t0 / int64(10*time.Second), Count: 60}}}
	require.Equal(t, 1, n.Link().Apply(t0, &member, ScopePoP).Merged)
	admitted := 0
	for range 100 {
		if d, _ := n.Decide(t0, "per-ip", "k", 1); d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted, "a quarter of the 40 left")
	n.Link().Flush(t0, nil)
	for range 100 {
		if d, _ := n.Decide(t0+time.Millisecond.Nanoseconds(), "per-ip", "k", 1); d.Allowed {
			admitted++
		}
	}
	// Seen 10 of 70: a quarter of the 30 left, 7 more.
	assert.Equal(t, 17, admitted)
}

// The counts of unheard PoPs are frozen: they are left out of the shares, so
// a side splits its headroom among its own nodes (with keep, the whole
// headroom its view leaves, as before).
func TestAllowanceLeavesUnheardPoPsOut(t *testing.T) {
	run := func(unheard []string) int {
		rules := []Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal}}
		n, err := New(Config{Self: replica("a", 1), Rules: rules})
		require.NoError(t, err)
		n.Link().SetEpoch(1)
		n.Link().SetAllowance(ScopeGlobal, Allowance{Horizon: 50 * time.Millisecond, Members: 1, PoPs: 3})
		settle(t, n, "api", 10*time.Second)
		win := t0 / int64(10*time.Second)
		for _, p := range []identity.Replica{identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1), identity.PoPReplica(identity.PoPID{Region: "ap", PoP: "sin"}, 1)} {
			d := wire.Delta{Sender: p, Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: win, Count: 25}}}
			require.Equal(t, 1, n.Link().Apply(t0, &d, ScopeGlobal).Merged)
		}
		n.Link().SetUnheard(t0, unheard)
		admitted := 0
		decide := func(now int64) {
			for range 100 {
				if d, _ := n.Decide(now, "api", "k", 1); d.Allowed {
					admitted++
				}
			}
		}
		decide(t0)
		n.Link().Flush(t0, nil)
		decide(t0 + 50*ms)
		return admitted
	}
	// Heard: 1/3 of 50 (16), then 16 seen of K = 66, 1/3 of 34 (11).
	assert.Equal(t, 16+11, run(nil))
	// iad unheard: 16 of K - 25 = 41 (0.39) of 34 (13).
	assert.Equal(t, 16+13, run([]string{"us/iad"}))
}
