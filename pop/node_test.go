package pop

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).UnixNano()

func replica(node string, inc uint64) crdt.Replica {
	return crdt.Replica{Region: "eu", PoP: "ams", Node: node, Incarnation: inc}
}

func testRules() []Rule {
	return []Rule{
		{Name: "api", Limit: 10, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
		{Name: "per-ip", Limit: 5, Window: 10 * time.Second, Cost: 1, Scope: ScopePoP},
		{Name: "local", Limit: 5, Window: time.Second, Cost: 1, Scope: ScopeNode},
		{Name: "watch", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, Mode: Shadow},
	}
}

func newNode(t *testing.T, self crdt.Replica) *Node {
	t.Helper()
	n, err := New(Config{Self: self, Rules: testRules()})
	require.NoError(t, err)
	return n
}

func estimate(t *testing.T, n *Node, now int64, rule, key string) float64 {
	t.Helper()
	v, err := n.View(now, rule, key)
	require.NoError(t, err)
	return v.Estimate
}

func TestDecideRejectsBadInputAndCountsNothing(t *testing.T) {
	n := newNode(t, replica("a", 1))
	tests := []struct {
		name      string
		rule, key string
		cost      uint64
		want      error
	}{
		{"unknown rule", "nope", "k", 1, ErrUnknownRule},
		{"empty key", "api", "", 1, ErrEmptyKey},
		{"key too long", "api", strings.Repeat("k", crdt.MaxKeyLen+1), 1, ErrKeyTooLong},
		{"zero cost", "api", "k", 0, ErrBadCost},
		{"cost over limit", "api", "k", 11, ErrCostOverLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := n.Decide(t0, tt.rule, tt.key, tt.cost)
			require.ErrorIs(t, err, tt.want)
		})
	}
	v, err := n.View(t0, "api", "k")
	require.NoError(t, err)
	assert.Empty(t, v.Windows)
	assert.Zero(t, n.Stats().Store.Keys)
}

func TestDecideEnforcesAndReports(t *testing.T) {
	n := newNode(t, replica("a", 1))
	for i := 0; i < 10; i++ {
		d, err := n.Decide(t0, "api", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i)
		assert.Equal(t, uint64(9-i), d.Remaining)
		assert.Equal(t, uint64(10), d.Limit)
	}
	d, err := n.Decide(t0, "api", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Zero(t, d.Remaining)
	// t0 is at the start of a minute: the 10 counts must wait for the next
	// window and decay by a tenth: 60s + 6s.
	assert.Equal(t, 66*time.Second, d.RetryAfter)
	assert.Equal(t, 2*time.Minute, d.Reset)
	assert.InDelta(t, 10, estimate(t, n, t0, "api", "k"), 1e-9, "a denial counts nothing")
}

func TestShadowCountsButAlwaysAdmits(t *testing.T) {
	n := newNode(t, replica("a", 1))
	var shadowDenied int
	for i := 0; i < 5; i++ {
		d, err := n.Decide(t0, "watch", "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		if d.ShadowDenied {
			shadowDenied++
		}
	}
	assert.Equal(t, 3, shadowDenied)
	assert.InDelta(t, 2, estimate(t, n, t0, "watch", "k"), 1e-9, "counts what enforce would have admitted")
}

// TestConcurrentDecideNeverExceedsLimit: many goroutines on one key within
// one window admit exactly the limit, never more.
func TestConcurrentDecideNeverExceedsLimit(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{{Name: "r", Limit: 1000, Window: time.Minute, Cost: 1, Scope: ScopeGlobal}}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := 0
			for i := 0; i < 500; i++ {
				d, err := n.Decide(t0+int64(i), "r", "hot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					local++
				}
			}
			mu.Lock()
			admitted += local
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, 1000, admitted)
}

func exchange(t *testing.T, now int64, from *Node, to *Node, via Scope) ApplyStats {
	t.Helper()
	var total ApplyStats
	for _, out := range from.Flush(now) {
		if out.Scope == ScopePoP && via == ScopeGlobal {
			continue // pop deltas never leave the PoP
		}
		total.add(to.Apply(now, &out.Delta, via))
	}
	return total
}

func TestReplicationByScope(t *testing.T) {
	a, b := newNode(t, replica("a", 1)), newNode(t, replica("b", 1))
	for _, r := range []string{"api", "per-ip", "local"} {
		for i := 0; i < 3; i++ {
			_, err := a.Decide(t0, r, "k", 1)
			require.NoError(t, err)
		}
	}
	st := exchange(t, t0, a, b, ScopePoP)
	assert.Equal(t, 2, st.Merged, "api and per-ip")
	assert.InDelta(t, 3, estimate(t, b, t0, "api", "k"), 1e-9)
	assert.InDelta(t, 3, estimate(t, b, t0, "per-ip", "k"), 1e-9)
	assert.Zero(t, estimate(t, b, t0, "local", "k"), "node scope never leaves the node")

	// A pop-scope entry arriving from another PoP is refused and counted.
	other := crdt.Delta{Sender: crdt.Replica{Region: "us", PoP: "iad", Node: "x", Incarnation: 1}, Entries: []crdt.Entry{
		{Rule: "per-ip", Key: "k", Window: t0 / int64(10*time.Second), Count: 50},
		{Rule: "local", Key: "k", Window: t0 / int64(time.Second), Count: 50},
		{Rule: "ghost", Key: "k", Window: 1, Count: 50},
		{Rule: "api", Key: "k", Window: t0 / int64(time.Minute), Count: 4},
	}}
	st = b.Apply(t0, &other, ScopeGlobal)
	assert.Equal(t, ApplyStats{Merged: 1, WrongScope: 2, UnknownRule: 1}, st)
	assert.InDelta(t, 7, estimate(t, b, t0, "api", "k"), 1e-9)
	assert.InDelta(t, 3, estimate(t, b, t0, "per-ip", "k"), 1e-9)

	// A delta claiming to come from another PoP over the PoP transport is refused.
	st = b.Apply(t0, &other, ScopePoP)
	assert.Equal(t, 4, st.WrongScope)
	// Our own echo is ignored.
	for _, out := range a.AntiEntropy(t0) {
		assert.Equal(t, len(out.Delta.Entries), a.Apply(t0, &out.Delta, ScopePoP).Echo)
	}
	assert.Equal(t, 1+2+4, b.Stats().Applied.Rejected(), "unknown rule + wrong scope, both applies")
}

func TestApplyIgnoresEntriesBeyondSkew(t *testing.T) {
	b := newNode(t, replica("b", 1))
	w := t0 / int64(10*time.Second)
	d := crdt.Delta{Sender: replica("a", 1), Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: w + 1, Count: 3}}}
	assert.Equal(t, 1, b.Apply(t0, &d, ScopePoP).Ahead, "next window starts 10s later, beyond 2s skew")
	assert.Equal(t, 1, b.Apply(t0+int64(9*time.Second), &d, ScopePoP).Merged, "1s before it starts: within skew")
}

// TestRestartedNodeRelearnsAndAdds: a node restarts with a new incarnation,
// learns the live windows from a peer's state, and its new counts add to the
// old incarnation's on every node.
func TestRestartedNodeRelearnsAndAdds(t *testing.T) {
	a1, b := newNode(t, replica("a", 1)), newNode(t, replica("b", 1))
	for i := 0; i < 4; i++ {
		_, err := a1.Decide(t0, "api", "k", 1)
		require.NoError(t, err)
	}
	exchange(t, t0, a1, b, ScopePoP)

	a2 := newNode(t, replica("a", 2)) // restart: fresh memory, new incarnation
	now := t0 + int64(time.Second)
	for _, d := range b.State(now) {
		a2.Apply(now, &d, ScopePoP)
	}
	assert.InDelta(t, 4, estimate(t, a2, now, "api", "k"), 1e-9, "no undercount after restart")
	for i := 0; i < 3; i++ {
		_, err := a2.Decide(now, "api", "k", 1)
		require.NoError(t, err)
	}
	exchange(t, now, a2, b, ScopePoP)
	assert.InDelta(t, 7, estimate(t, b, now, "api", "k"), 1e-9)
	assert.InDelta(t, 7, estimate(t, a2, now, "api", "k"), 1e-9)
	v, err := b.View(now, "api", "k")
	require.NoError(t, err)
	require.Len(t, v.Windows, 1)
	assert.Equal(t, map[string]uint64{"eu/ams/a#1": 4, "eu/ams/a#2": 3}, v.Windows[0].Replicas)
}

func TestSetRulesKeepsCountsOfUnchangedRules(t *testing.T) {
	n := newNode(t, replica("a", 1))
	for _, r := range []string{"api", "per-ip"} {
		for i := 0; i < 3; i++ {
			_, err := n.Decide(t0, r, "k", 1)
			require.NoError(t, err)
		}
	}
	rules := testRules()
	rules[0].Limit = 20                     // api: limit changes, counts stay
	rules[1].Window = 20 * time.Second      // per-ip: new window, fresh counts
	rules = append(rules[:2], rules[3:]...) // local removed
	require.NoError(t, n.SetRules(rules))
	assert.InDelta(t, 3, estimate(t, n, t0, "api", "k"), 1e-9)
	assert.Zero(t, estimate(t, n, t0, "per-ip", "k"))
	_, err := n.Decide(t0, "local", "k", 1)
	assert.ErrorIs(t, err, ErrUnknownRule)
	d, err := n.Decide(t0, "api", "k", 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(20), d.Limit)

	bad := append(testRules(), Rule{Name: "api", Limit: 1, Window: time.Second, Cost: 1})
	err = n.SetRules(bad)
	require.ErrorContains(t, err, "rules[4].name")
	assert.Len(t, n.Rules(), 3, "a bad set changes nothing")
}

func TestRuleValidation(t *testing.T) {
	ok := Rule{Name: "r", Limit: 10, Window: time.Second, Cost: 1}
	tests := []struct {
		name   string
		mutate func(*Rule)
		want   string
	}{
		{"empty name", func(r *Rule) { r.Name = "" }, "name:"},
		{"slash in name", func(r *Rule) { r.Name = "a/b" }, "name:"},
		{"zero limit", func(r *Rule) { r.Limit = 0 }, "limit:"},
		{"sub-ms window", func(r *Rule) { r.Window = time.Microsecond }, "window:"},
		{"fractional ms window", func(r *Rule) { r.Window = 1500 * time.Microsecond }, "window:"},
		{"zero cost", func(r *Rule) { r.Cost = 0 }, "cost:"},
		{"cost over limit", func(r *Rule) { r.Cost = 11 }, "cost:"},
		{"bad scope", func(r *Rule) { r.Scope = 9 }, "scope:"},
	}
	require.NoError(t, ok.Validate())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mutate(&r)
			assert.ErrorContains(t, r.Validate(), tt.want)
		})
	}
}

func TestTickDropsExpiredKeys(t *testing.T) {
	n := newNode(t, replica("a", 1))
	_, err := n.Decide(t0, "local", "k", 1)
	require.NoError(t, err)
	n.Tick(t0 + int64(time.Second))
	assert.Equal(t, 1, n.Stats().Store.Keys)
	n.Tick(t0 + int64(2*time.Second))
	assert.Zero(t, n.Stats().Store.Keys)
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: testRules(), MaxKeys: 128, Shards: 2})
	require.NoError(t, err)
	untracked := 0
	for i := 0; i < 5000; i++ {
		d, err := n.Decide(t0, "api", "10.0."+string(rune('a'+i%26))+"."+time.Duration(i).String(), 1)
		require.NoError(t, err)
		if d.Untracked {
			untracked++
		}
	}
	st := n.Stats()
	assert.LessOrEqual(t, st.Store.Keys, 128)
	assert.Equal(t, st.Store.Keys, st.KeysByRule["api"])
	assert.Equal(t, uint64(untracked), st.Store.Overflow)
	assert.Greater(t, st.Store.Evicted+st.Store.Overflow, uint64(4000))
}

func TestPeekCountsNothing(t *testing.T) {
	n := newNode(t, replica("a", 1))
	for i := 0; i < 10; i++ {
		_, err := n.Decide(t0, "api", "k", 1)
		require.NoError(t, err)
	}
	d, err := n.Peek(t0, "api", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	d, err = n.Peek(t0, "api", "other", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, uint64(9), d.Remaining)
	_, err = n.Peek(t0, "nope", "k", 1)
	assert.ErrorIs(t, err, ErrUnknownRule)
	v, err := n.View(t0, "api", "other")
	require.NoError(t, err)
	assert.Empty(t, v.Windows, "a peek creates no key")
}

// TestTickForgetsOldIncarnations: restarts pile up replica identities; once
// their counts have expired, Tick forgets them.
func TestTickForgetsOldIncarnations(t *testing.T) {
	n := newNode(t, replica("b", 1))
	w := int64(10 * time.Second)
	for inc := uint64(1); inc <= 2000; inc++ {
		key := "k" + strconv.FormatUint(inc%100, 10) // at most 20 replicas per key
		d := crdt.Delta{Sender: replica("a", inc), Entries: []crdt.Entry{{Rule: "per-ip", Key: key, Window: t0 / w, Count: 1}}}
		require.Equal(t, 1, n.Apply(t0, &d, ScopePoP).Merged)
	}
	assert.Equal(t, 2001, n.Stats().Store.Replicas)
	n.Tick(t0)
	assert.Equal(t, 2001, n.Stats().Store.Replicas, "all still hold live counts")
	later := t0 + int64(forgetReplicasEvery)
	n.Tick(later)
	assert.Equal(t, 1, n.Stats().Store.Replicas, "expired incarnations are forgotten")
	d := crdt.Delta{Sender: replica("a", 9999), Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: later / w, Count: 4}}}
	assert.Equal(t, ApplyStats{Merged: 1}, n.Apply(later, &d, ScopePoP))
	assert.InDelta(t, 4, estimate(t, n, later, "per-ip", "k"), 1e-9, "the reused ID carries only the new counts")
}
