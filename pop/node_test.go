package pop

import (
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).UnixNano()

func replica(node string, inc uint64) identity.Replica {
	return identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: node, Incarnation: inc}
}

func testRules() []Rule {
	return []Rule{
		{Name: "api", Limit: 10, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
		{Name: "per-ip", Limit: 5, Window: 10 * time.Second, Cost: 1, Scope: ScopePoP},
		{Name: "local", Limit: 5, Window: time.Second, Cost: 1, Scope: ScopeNode},
		{Name: "watch", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, Mode: Shadow},
	}
}

func newNode(t *testing.T, self identity.Replica) *Node {
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

// exchange flushes from and applies what travels over via to to: the Local
// delta to a member, the PoP aggregate to another PoP.
func exchange(t *testing.T, now int64, from *Node, to *Node, via Scope) ApplyStats {
	t.Helper()
	b := from.Link().Flush(now, nil)
	if via == ScopePoP {
		return to.Link().Apply(now, &b.Local, ScopePoP)
	}
	return to.Link().Apply(now, &b.PoP, ScopeGlobal)
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
	other := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1), Entries: []crdt.Entry{
		{Rule: "per-ip", Key: "k", Window: t0 / int64(10*time.Second), Count: 50},
		{Rule: "local", Key: "k", Window: t0 / int64(time.Second), Count: 50},
		{Rule: "ghost", Key: "k", Window: 1, Count: 50},
		{Rule: "api", Key: "k", Window: t0 / int64(time.Minute), Count: 4},
	}}
	st = b.Link().Apply(t0, &other, ScopeGlobal)
	assert.Equal(t, ApplyStats{Merged: 1, WrongScope: 2, UnknownRule: 1}, st)
	assert.InDelta(t, 7, estimate(t, b, t0, "api", "k"), 1e-9)
	assert.InDelta(t, 3, estimate(t, b, t0, "per-ip", "k"), 1e-9)

	// A delta claiming to come from another PoP over the PoP transport is refused.
	st = b.Link().Apply(t0, &other, ScopePoP)
	assert.Equal(t, 4, st.WrongScope)
	// Our own echo is ignored.
	out := a.Link().AntiEntropy(t0, nil)
	require.Len(t, out.Local.Entries, 2)
	assert.Equal(t, 2, a.Link().Apply(t0, &out.Local, ScopePoP).Echo)
	assert.Equal(t, 1+2+4, b.Stats().Applied.Rejected(), "unknown rule + wrong scope, both applies")
}

func TestApplyIgnoresEntriesBeyondSkew(t *testing.T) {
	b := newNode(t, replica("b", 1))
	w := t0 / int64(10*time.Second)
	d := wire.Delta{Sender: replica("a", 1), Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: w + 1, Count: 3}}}
	assert.Equal(t, 1, b.Link().Apply(t0, &d, ScopePoP).Ahead, "next window starts 10s later, beyond 2s skew")
	assert.Equal(t, 1, b.Link().Apply(t0+int64(9*time.Second), &d, ScopePoP).Merged, "1s before it starts: within skew")
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
	for _, d := range b.Link().State(now) {
		a2.Link().Apply(now, &d, ScopePoP)
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

// TestTickForgetsOldIncarnations: restarts pile up replica identities
// (here 250 PoPs restarted 8 times each); once their counts have expired,
// Tick forgets them.
func TestTickForgetsOldIncarnations(t *testing.T) {
	n := newNode(t, replica("b", 1))
	w := int64(10 * time.Second)
	for inc := uint64(1); inc <= 2000; inc++ {
		key := "k" + strconv.FormatUint(inc%100, 10) // at most 20 replicas per key
		sender := identity.PoPReplica(identity.PoPID{Region: "us", PoP: "p" + strconv.FormatUint(inc%250, 10)}, inc)
		d := wire.Delta{Sender: sender, Entries: []crdt.Entry{{Rule: "api", Key: key, Window: t0 / int64(time.Minute), Count: 1}}}
		require.Equal(t, 1, n.Link().Apply(t0, &d, ScopeGlobal).Merged)
	}
	assert.Equal(t, 2001, n.Stats().Store.Replicas)
	n.Tick(t0)
	assert.Equal(t, 2001, n.Stats().Store.Replicas, "all still hold live counts")
	later := t0 + 3*int64(time.Minute)
	n.Tick(later)
	assert.Equal(t, 1, n.Stats().Store.Replicas, "expired incarnations are forgotten")
	d := wire.Delta{Sender: replica("a", 9999), Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: later / w, Count: 4}}}
	assert.Equal(t, ApplyStats{Merged: 1}, n.Link().Apply(later, &d, ScopePoP))
	assert.InDelta(t, 4, estimate(t, n, later, "per-ip", "k"), 1e-9, "the reused ID carries only the new counts")
}

func TestNewRefusesAggregateName(t *testing.T) {
	_, err := New(Config{Self: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), Rules: testRules()})
	assert.ErrorContains(t, err, "reserved")
}

// entriesByKey maps a delta's entries by rule/key@window for comparison.
func entriesByKey(d wire.Delta) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range d.Entries {
		out[e.Rule+"/"+e.Key+"@"+strconv.FormatInt(e.Window, 10)] = e.Count
	}
	return out
}

// TestPoPTotalsOfThreeMembers: a node of a 3-member PoP publishes, for the
// global keys it owns, the PoP total: its own count plus the two members'
// counts, also when only a member counted.
func TestPoPTotalsOfThreeMembers(t *testing.T) {
	a, b, c := newNode(t, replica("a", 1)), newNode(t, replica("b", 1)), newNode(t, replica("c", 1))
	for _, n := range []*Node{a, b, c} {
		n.Link().SetEpoch(5)
	}
	decide := func(n *Node, rule, key string, times int) {
		for i := 0; i < times; i++ {
			_, err := n.Decide(t0, rule, key, 1)
			require.NoError(t, err)
		}
	}
	decide(a, "api", "k1", 1)
	decide(b, "api", "k1", 2)
	decide(c, "api", "k1", 3)
	decide(b, "api", "k2", 4)         // only members count k2
	decide(c, "api", "not-mine", 5)   // owned by another member
	decide(b, "per-ip", "k1", 2)      // pop scope: stays in the PoP
	decide(a, "local", "k1", 1)       // node scope: stays on the node
	for _, m := range []*Node{b, c} { // members' own counts reach a
		out := m.Link().Flush(t0, func(string) bool { return false })
		assert.Empty(t, out.PoP.Entries, "owns nothing")
		require.Zero(t, a.Link().Apply(t0, &out.Local, ScopePoP).Rejected())
	}
	owns := func(key string) bool { return key != "not-mine" }
	w := strconv.FormatInt(t0/int64(time.Minute), 10)
	out := a.Link().Flush(t0, owns)
	assert.Equal(t, replica("a", 1), out.Local.Sender)
	assert.Equal(t, identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 5), out.PoP.Sender)
	for _, d := range []wire.Delta{out.Local, out.PoP} {
		assert.Equal(t, t0, d.SentAt)
		assert.Equal(t, uint64(5), d.Epoch)
	}
	assert.Equal(t, map[string]uint64{"api/k1@" + w: 1}, entriesByKey(out.Local), "own counts only, no node scope")
	assert.Equal(t, map[string]uint64{"api/k1@" + w: 6, "api/k2@" + w: 4}, entriesByKey(out.PoP),
		"PoP totals of owned global keys, k2 without an own count")

	out = a.Link().Flush(t0, owns)
	assert.Empty(t, out.Local.Entries)
	assert.Empty(t, out.PoP.Entries, "nothing changed since")

	// A member's count alone changes the PoP total.
	decide(b, "api", "k2", 1)
	bOut := b.Link().Flush(t0, nil)
	assert.Equal(t, ApplyStats{Merged: 1}, a.Link().Apply(t0, &bOut.Local, ScopePoP))
	out = a.Link().Flush(t0, owns)
	assert.Empty(t, out.Local.Entries)
	assert.Equal(t, map[string]uint64{"api/k2@" + w: 5}, entriesByKey(out.PoP))

	// Anti-entropy: every own count and every owned PoP total.
	out = a.Link().AntiEntropy(t0, owns)
	assert.Equal(t, map[string]uint64{"api/k1@" + w: 1}, entriesByKey(out.Local))
	assert.Equal(t, map[string]uint64{"api/k1@" + w: 6, "api/k2@" + w: 5}, entriesByKey(out.PoP))
	out = a.Link().AntiEntropy(t0, nil)
	assert.Equal(t, map[string]uint64{"api/k1@" + w: 6, "api/k2@" + w: 5, "api/not-mine@" + w: 5}, entriesByKey(out.PoP))
}

// TestTwoPoPsSpeakThroughAggregates: another PoP learns a PoP's total from its
// aggregate alone, and a PoP never republishes what it heard from others.
func TestTwoPoPsSpeakThroughAggregates(t *testing.T) {
	a1, a2 := newNode(t, replica("a1", 1)), newNode(t, replica("a2", 1))
	iad := newNode(t, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "i1", Incarnation: 1})
	for _, n := range []*Node{a1, a2, iad} {
		n.Link().SetEpoch(3)
	}
	for i := 0; i < 2; i++ {
		_, _ = a1.Decide(t0, "api", "k", 1)
	}
	for i := 0; i < 3; i++ {
		_, _ = a2.Decide(t0, "api", "k", 1)
		_, _ = iad.Decide(t0, "api", "k", 1)
	}
	owner := func(n *Node) func(string) bool { return func(string) bool { return n == a1 } }
	out2 := a2.Link().Flush(t0, owner(a2))
	assert.Empty(t, out2.PoP.Entries, "a1 owns every key")
	require.Equal(t, 1, a1.Link().Apply(t0, &out2.Local, ScopePoP).Merged)
	out1 := a1.Link().Flush(t0, owner(a1))
	require.Equal(t, 1, a2.Link().Apply(t0, &out1.Local, ScopePoP).Merged)
	require.Equal(t, 1, iad.Link().Apply(t0, &out1.PoP, ScopeGlobal).Merged)
	assert.Equal(t, 0, iad.Link().Apply(t0, &out2.PoP, ScopeGlobal).Merged)
	assert.InDelta(t, 8, estimate(t, iad, t0, "api", "k"), 1e-9, "ams's 5 and iad's own 3")

	outI := iad.Link().Flush(t0, nil)
	for _, n := range []*Node{a1, a2} {
		require.Equal(t, 1, n.Link().Apply(t0, &outI.PoP, ScopeGlobal).Merged)
		assert.InDelta(t, 8, estimate(t, n, t0, "api", "k"), 1e-9)
	}
	out := a1.Link().AntiEntropy(t0, nil)
	assert.Equal(t, uint64(5), out.PoP.Entries[0].Count, "iad's count is not part of ams's total")
	assert.Empty(t, a1.Link().Flush(t0, nil).PoP.Entries, "a foreign count changes no PoP total")
	v, err := a1.View(t0, "api", "k")
	require.NoError(t, err)
	require.Len(t, v.Windows, 1)
	assert.Equal(t, map[string]uint64{"eu/ams/a1#1": 2, "eu/ams/a2#1": 3, "us/iad/*#3": 3}, v.Windows[0].Replicas)
}

// TestApplySenderRules: which sender may use which transport.
func TestApplySenderRules(t *testing.T) {
	w := t0 / int64(time.Minute)
	pw := t0 / int64(10*time.Second)
	tests := []struct {
		name   string
		sender identity.Replica
		via    Scope
		want   ApplyStats
	}{
		{"member via pop", replica("b", 1), ScopePoP, ApplyStats{Merged: 2}},
		{"former self via pop", replica("a", 0), ScopePoP, ApplyStats{Merged: 2}},
		{"member via global", replica("b", 1), ScopeGlobal, ApplyStats{WrongScope: 2}},
		{"own aggregate of the epoch via global", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 7), ScopeGlobal, ApplyStats{Echo: 2}},
		{"own aggregate of a former epoch via global", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 6), ScopeGlobal, ApplyStats{Merged: 1, WrongScope: 1}},
		{"own aggregate via pop", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 6), ScopePoP, ApplyStats{WrongScope: 2}},
		{"other aggregate via global", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 7), ScopeGlobal, ApplyStats{Merged: 1, WrongScope: 1}},
		{"other region's PoP of the same name via global", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "ams"}, 7), ScopeGlobal, ApplyStats{Merged: 1, WrongScope: 1}},
		{"other aggregate via pop", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 7), ScopePoP, ApplyStats{WrongScope: 2}},
		{"other PoP's node via global", identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}, ScopeGlobal, ApplyStats{WrongScope: 2}},
		{"other PoP's node via pop", identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}, ScopePoP, ApplyStats{WrongScope: 2}},
		{"self via pop", replica("a", 1), ScopePoP, ApplyStats{Echo: 2}},
		{"self via global", replica("a", 1), ScopeGlobal, ApplyStats{Echo: 2}},
		{"invalid sender", identity.Replica{PoPID: identity.PoPID{Region: "e/u", PoP: "ams"}, Node: "*", Incarnation: 1}, ScopeGlobal, ApplyStats{WrongScope: 2}},
		{"via node scope", replica("b", 1), ScopeNode, ApplyStats{WrongScope: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, replica("a", 1))
			n.Link().SetEpoch(7)
			d := wire.Delta{Sender: tt.sender, Entries: []crdt.Entry{
				{Rule: "api", Key: "k", Window: w, Count: 3},
				{Rule: "per-ip", Key: "k", Window: pw, Count: 3},
			}}
			assert.Equal(t, tt.want, n.Link().Apply(t0, &d, tt.via))
			assert.Equal(t, tt.want, n.Stats().Applied)
			want := 0.0
			if tt.want.Merged > 0 {
				want = 3
			}
			assert.InDelta(t, want, estimate(t, n, t0, "api", "k"), 1e-9)
		})
	}
}

// TestEpochZeroPublishesNoAggregate: until the PoP agrees on an epoch, a node
// sends its own counts to its members but no aggregate.
func TestEpochZeroPublishesNoAggregate(t *testing.T) {
	n := newNode(t, replica("a", 1))
	assert.Zero(t, n.Link().Epoch())
	_, err := n.Decide(t0, "api", "k", 1)
	require.NoError(t, err)
	out := n.Link().Flush(t0, nil)
	assert.Len(t, out.Local.Entries, 1)
	assert.Empty(t, out.PoP.Entries)
	assert.Zero(t, out.Local.Epoch)
	assert.Zero(t, out.PoP.Epoch)
	assert.Empty(t, n.Link().AntiEntropy(t0, nil).PoP.Entries)

	n.Link().SetEpoch(3)
	assert.Equal(t, uint64(3), n.Link().Epoch())
	assert.Empty(t, n.Link().Flush(t0, nil).PoP.Entries, "the change was flushed at epoch 0")
	ae := n.Link().AntiEntropy(t0, nil)
	assert.Equal(t, identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 3), ae.PoP.Sender)
	assert.Equal(t, uint64(3), ae.Local.Epoch)
	assert.Len(t, ae.PoP.Entries, 1, "anti-entropy publishes it")
	_, err = n.Decide(t0, "api", "k", 1)
	require.NoError(t, err)
	out = n.Link().Flush(t0, nil)
	require.Len(t, out.PoP.Entries, 1)
	assert.Equal(t, uint64(2), out.PoP.Entries[0].Count)
}

// TestSetEpochEchoRule: the own PoP's aggregate of the current epoch is an
// echo; once the epoch moves on, that former aggregate counts as foreign (the
// PoP restarted and lost it), without entering the new PoP total.
func TestSetEpochEchoRule(t *testing.T) {
	a, b := newNode(t, replica("a", 1)), newNode(t, replica("b", 2))
	a.Link().SetEpoch(1)
	b.Link().SetEpoch(1)
	for i := 0; i < 4; i++ {
		_, _ = a.Decide(t0, "api", "k", 1)
	}
	agg := a.Link().Flush(t0, nil).PoP
	require.Len(t, agg.Entries, 1)
	assert.Equal(t, ApplyStats{Echo: 1}, b.Link().Apply(t0, &agg, ScopeGlobal), "relayed back by another PoP")
	assert.Zero(t, estimate(t, b, t0, "api", "k"))

	b.Link().SetEpoch(2) // the PoP restarted; a's state is gone
	assert.Equal(t, ApplyStats{Merged: 1}, b.Link().Apply(t0, &agg, ScopeGlobal))

	// An epoch a member started (its incarnation) and left: that member's
	// counts arrive per node, so its aggregate is an echo.
	c := newNode(t, replica("c", 3))
	c.Link().SetEpoch(2)
	local := a.Link().AntiEntropy(t0, nil).Local
	assert.Equal(t, ApplyStats{Merged: 1}, c.Link().Apply(t0, &local, ScopePoP))
	assert.Equal(t, ApplyStats{Echo: 1}, c.Link().Apply(t0, &agg, ScopeGlobal), "a#1 is a member: its epoch 1 is no former state")
	assert.InDelta(t, 4, estimate(t, b, t0, "api", "k"), 1e-9)
	assert.Empty(t, b.Link().Flush(t0, nil).PoP.Entries, "a former aggregate is no member")
	assert.Empty(t, b.Link().AntiEntropy(t0, nil).PoP.Entries)
	_, _ = b.Decide(t0, "api", "k", 1)
	out := b.Link().Flush(t0, nil)
	require.Len(t, out.PoP.Entries, 1)
	assert.Equal(t, uint64(1), out.PoP.Entries[0].Count)
	assert.Equal(t, identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 2), out.PoP.Sender)
}

// TestStateCarriesEpochAndAggregates: State returns one delta per replica with
// the node's epoch, aggregates among them, and a joiner that applies each by
// its sender's kind learns everything.
func TestStateCarriesEpochAndAggregates(t *testing.T) {
	a := newNode(t, replica("a", 1))
	a.Link().SetEpoch(4)
	_, _ = a.Decide(t0, "api", "k", 1)
	_, _ = a.Decide(t0, "per-ip", "k", 1)
	_, _ = a.Decide(t0, "local", "k", 1)
	w := t0 / int64(time.Minute)
	iad := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 9), Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: w, Count: 7}}}
	require.Equal(t, 1, a.Link().Apply(t0, &iad, ScopeGlobal).Merged)
	st := a.Link().State(t0)
	require.Len(t, st, 2)
	assert.Equal(t, replica("a", 1), st[0].Sender)
	assert.Equal(t, identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 9), st[1].Sender)
	joiner := newNode(t, replica("b", 1))
	joiner.Link().SetEpoch(4)
	for _, d := range st {
		assert.Equal(t, uint64(4), d.Epoch)
		assert.Equal(t, t0, d.SentAt)
		via := ScopePoP
		if d.Sender.IsPoP() {
			via = ScopeGlobal
		}
		assert.Zero(t, joiner.Link().Apply(t0, &d, via).Rejected())
	}
	assert.InDelta(t, 8, estimate(t, joiner, t0, "api", "k"), 1e-9)
	assert.InDelta(t, 1, estimate(t, joiner, t0, "per-ip", "k"), 1e-9)
	assert.Empty(t, newNode(t, replica("c", 1)).Link().State(t0), "no empty deltas")
}

// TestFlushToWithoutLocal: a node with no member to tell builds no Local
// delta, publishes its totals and clears its change marks all the same.
func TestFlushToWithoutLocal(t *testing.T) {
	n := newNode(t, replica("a", 1))
	n.Link().SetEpoch(1)
	_, err := n.Decide(t0, "api", "k", 3)
	require.NoError(t, err)
	b := n.Link().FlushTo(t0, nil, false)
	assert.Empty(t, b.Local.Entries)
	require.Len(t, b.PoP.Entries, 1)
	assert.Equal(t, uint64(3), b.PoP.Entries[0].Count)
	again := n.Link().Flush(t0, nil)
	assert.Empty(t, again.Local.Entries, "the own change was flushed")
	assert.Empty(t, again.PoP.Entries)
}

// TestApplyClampsCountsAboveLimit: a replica claims 2^62 requests on a key
// with a limit of 10. It is merged as 10, so the key is denied only for as
// long as one replica that spent the whole limit could deny it: usable again
// within two windows, and the clamp is counted.
func TestApplyClampsCountsAboveLimit(t *testing.T) {
	n := newNode(t, replica("a", 1))
	win := int64(time.Minute)
	w := t0 / win
	start := w * win
	d := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 3), Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: w, Count: 1 << 62}}}
	st := n.Link().Apply(start, &d, ScopeGlobal)
	assert.Equal(t, ApplyStats{Merged: 1, Clamped: 1}, st)
	assert.Equal(t, 1, n.Stats().Applied.Clamped)

	dec, err := n.Decide(start+1, "api", "k", 1)
	require.NoError(t, err)
	assert.False(t, dec.Allowed, "a replica that spent the limit denies the key")
	// Resent in the next window it is clamped again; two windows after the
	// last one claimed, the key is free whatever was claimed.
	d.Entries[0].Window = w + 1
	assert.Equal(t, 1, n.Link().Apply(start+win, &d, ScopeGlobal).Clamped)
	// Halfway through the window after the claim, the sliding estimate
	// weighs the clamped count by one half: a limit of 10 leaves 5.
	dec, err = n.Peek(start+2*win+win/2, "api", "k", 1)
	require.NoError(t, err)
	assert.True(t, dec.Allowed)
	assert.EqualValues(t, 4, dec.Remaining, "10 - 5 - this request")
	dec, err = n.Decide(start+3*win+1, "api", "k", 1)
	require.NoError(t, err)
	assert.True(t, dec.Allowed)
	assert.EqualValues(t, 9, dec.Remaining)
}

func TestSynced(t *testing.T) {
	n, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}})
	require.NoError(t, err)
	assert.True(t, n.Synced(), "a new node core has no past to wait for")
	n.Link().SetSynced(false)
	assert.False(t, n.Synced())
	n.Link().SetSynced(true)
	assert.True(t, n.Synced())
}

// TestApplyFindsRulesByWireName: a received entry finds its rule by the
// name it has on the wire, whether the node holds few rules (scanned) or
// many (looked up in a map), and an unknown name finds none.
func TestApplyFindsRulesByWireName(t *testing.T) {
	for _, nrules := range []int{1, smallRuleSet, smallRuleSet + 1, 40} {
		var rules []Rule
		for i := range nrules {
			rules = append(rules, Rule{Name: "r" + strconv.Itoa(i), Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal})
		}
		n, err := New(Config{Self: replica("b", 1), Rules: rules})
		require.NoError(t, err)
		w := t0 / int64(10*time.Second)
		d := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "nyc"}, 1)}
		for i := range nrules {
			d.Entries = append(d.Entries, crdt.Entry{Rule: rules[i].WireName(rules[i].Window), Key: "k", Window: w, Count: uint64(i + 1)})
		}
		d.Entries = append(d.Entries, crdt.Entry{Rule: "nope", Key: "k", Window: w, Count: 1})
		st := n.Link().Apply(t0, &d, ScopeGlobal)
		assert.Equal(t, nrules, st.Merged, "%d rules", nrules)
		assert.Equal(t, 1, st.UnknownRule, "%d rules", nrules)
		for i := range nrules {
			assert.InDelta(t, float64(i+1), estimate(t, n, t0, rules[i].Name, "k"), 1e-9, "%d rules: rule %d", nrules, i)
		}
	}
}

// dirtyDecision returns a Decision with every field set to something other
// than its zero value, found by reflection so that a field added later is
// covered too.
func dirtyDecision(t *testing.T) Decision {
	t.Helper()
	var d Decision
	v := reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint8, reflect.Uint64:
			f.SetUint(7)
		case reflect.Int64:
			f.SetInt(7)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]uint64{7}))
		default:
			t.Fatalf("Decision.%s: kind %s not covered", v.Type().Field(i).Name, f.Kind())
		}
	}
	return d
}

// decideRule writes its result through a pointer; it must overwrite every
// field, so that what it answers does not depend on what *d held.
func TestDecideRuleOverwritesEveryField(t *testing.T) {
	rules := append(testRules(),
		Rule{Name: "login", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, BlockFor: time.Minute},
		Rule{Name: "multi", Limit: 3, Window: time.Second, More: []Limit{{Limit: 4, Window: time.Minute}}, Cost: 1, Scope: ScopePoP},
		Rule{Name: "closed", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, OnUnsure: DenyUnsure},
	)
	a, err := New(Config{Self: replica("a", 1), Rules: rules})
	require.NoError(t, err)
	b, err := New(Config{Self: replica("a", 1), Rules: rules})
	require.NoError(t, err)
	for i := range 60 {
		for _, r := range rules {
			key := "k" + strconv.Itoa(i%3)
			cost := uint64(1 + i%2)
			if i%17 == 0 {
				cost = 100 // over every limit: an error
			}
			now := t0 + int64(i)*int64(100*time.Millisecond)
			want, wantErr := a.Decide(now, r.Name, key, cost)
			rs, ok := b.rules.Load().get(r.Name)
			require.True(t, ok)
			got := dirtyDecision(t)
			gotErr := b.decideRule(&got, now, rs, key, cost, "", howCount, nil)
			require.Equal(t, wantErr, gotErr, "%s %s at %d", r.Name, key, i)
			require.Equal(t, want, got, "%s %s at %d", r.Name, key, i)
		}
	}
}
