package pop

import (
	"fmt"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSparseStep(t *testing.T) {
	tests := []struct {
		limit  uint64
		voices int
		want   uint64
	}{
		{1000, 2, 125},
		{1000, 30, 8},
		{1000, 100, 2},
		{1000, 300, 0},
		{50, 4, 3},
		{1000, 0, 0},
		{1000, -1, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d", tt.limit, tt.voices), func(t *testing.T) {
			assert.Equal(t, tt.want, replicated.SparseStep(tt.limit, tt.voices))
		})
	}
	assert.Equal(t, 250.0, replicated.SparseNear(1000))
	assert.Equal(t, 800*time.Millisecond, replicated.SparseMinWindow(100*time.Millisecond))
}

// sparseNode is a node alone in its PoP with one global rule of limit 1000
// per minute, publishing under epoch 1.
func sparseNode(t *testing.T, window time.Duration) *Node {
	t.Helper()
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{
		{Name: "api", Limit: 1000, Window: window, Cost: 1, Scope: ScopeGlobal},
		{Name: "tiered", Limit: 1000, Window: window, Cost: 1, Scope: ScopeGlobal,
			Tiers: map[string][]Limit{"free": {{Limit: 100, Window: window}}}},
	}})
	require.NoError(t, err)
	n.Link().SetEpoch(1)
	return n
}

// published returns the PoP totals a flush at now publishes, by key.
func published(n *Node, now int64) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range n.Link().Flush(now, nil).PoP.Entries {
		out[e.Rule+"/"+e.Key] = e.Count
	}
	return out
}

func admitN(t *testing.T, n *Node, now int64, rule, key string, times int) {
	t.Helper()
	for range times {
		d, err := n.Decide(now, rule, key, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
}

// TestSparseFlush: with sparse updates among 2 PoPs (step 125, near 250), a
// PoP total is published once it moved by the step, and at every change once
// the key's estimate reaches a quarter of its limit; anti-entropy sends what
// was left out; a new epoch starts afresh.
func TestSparseFlush(t *testing.T) {
	n := sparseNode(t, time.Minute)
	n.Link().SetSparse(2, 50*time.Millisecond)
	now := t0

	admitN(t, n, now, "api", "k", 100)
	assert.Empty(t, published(n, now), "moved by 100 < 125 from 0")
	admitN(t, n, now, "api", "k", 30)
	assert.Equal(t, map[string]uint64{"api/k": 130}, published(n, now), "moved by 130")
	admitN(t, n, now, "api", "k", 100)
	assert.Empty(t, published(n, now), "230: moved by 100 since 130, estimate below 250")
	skipped, held := n.Link().SparseStats()
	assert.Equal(t, uint64(2), skipped)
	assert.Equal(t, 1, held)

	ae := n.Link().AntiEntropy(now, nil)
	assert.Equal(t, map[string]uint64{"api/k@" + winOf(now, time.Minute): 230}, entriesByKey(ae.PoP), "anti-entropy sends every total")

	admitN(t, n, now, "api", "k", 20)
	assert.Equal(t, map[string]uint64{"api/k": 250}, published(n, now), "near its limit")
	admitN(t, n, now, "api", "k", 1)
	assert.Equal(t, map[string]uint64{"api/k": 251}, published(n, now), "every change near the limit")

	// A remote PoP's total makes a key near its limit: a change of a few is
	// published at once.
	remote := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 9), SentAt: now, Epoch: 9,
		Entries: []crdt.Entry{{Rule: "api", Key: "r", Window: now / int64(time.Minute), Count: 600}}}
	require.Zero(t, n.Link().Apply(now, &remote, ScopeGlobal).Rejected())
	admitN(t, n, now, "api", "r", 3)
	assert.Equal(t, map[string]uint64{"api/r": 3}, published(n, now), "the fleet's estimate is near the limit")

	// Rules of several limits (tiers) publish every change.
	admitN(t, n, now, "tiered", "k", 1)
	assert.Equal(t, map[string]uint64{"tiered/k": 1}, published(n, now))

	// A new epoch: the others hold nothing of it, and the step counts from 0.
	n.Link().SetEpoch(2)
	admitN(t, n, now, "api", "k2", 124)
	assert.Empty(t, published(n, now))
	_, held = n.Link().SparseStats()
	assert.Equal(t, 0, held, "the former epoch's totals are forgotten")
}

// TestSparseOff: every change is published when sparse updates are off,
// among so many PoPs that the step is 1, for a window shorter than 8 x the
// lag, or while a PoP is unheard.
func TestSparseOff(t *testing.T) {
	tests := []struct {
		name   string
		window time.Duration
		voices int
		lag    time.Duration
		cut    bool
	}{
		{"off", time.Minute, 0, 50 * time.Millisecond, false},
		{"step of 1", time.Minute, 250, 50 * time.Millisecond, false},
		{"short window", time.Second, 2, 200 * time.Millisecond, false},
		{"a PoP unheard", time.Minute, 2, 50 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := sparseNode(t, tt.window)
			n.Link().SetSparse(tt.voices, tt.lag)
			if tt.cut {
				n.Link().SetUnheard(t0, []string{"us/iad"})
			}
			for i := 1; i <= 3; i++ {
				admitN(t, n, t0, "api", "k", 1)
				assert.Equal(t, map[string]uint64{"api/k": uint64(i)}, published(n, t0))
			}
		})
	}
}

// TestSparseForgetsDeadWindows: the totals remembered of a window go once
// it is no longer live, or its rule has another window.
func TestSparseForgetsDeadWindows(t *testing.T) {
	n := sparseNode(t, time.Minute)
	n.Link().SetSparse(2, 50*time.Millisecond)
	admitN(t, n, t0, "api", "k", 130)
	require.NotEmpty(t, published(n, t0))
	_, held := n.Link().SparseStats()
	require.Equal(t, 1, held)
	later := t0 + int64(2*time.Minute)
	published(n, later)
	_, held = n.Link().SparseStats()
	assert.Zero(t, held)

	// A rule set anew with another window starts afresh.
	admitN(t, n, later, "api", "k", 130)
	require.NotEmpty(t, published(n, later))
	_, held = n.Link().SparseStats()
	require.Equal(t, 1, held)
	require.NoError(t, n.SetRules([]Rule{{Name: "api", Limit: 1000, Window: 2 * time.Minute, Cost: 1, Scope: ScopeGlobal}}))
	published(n, later)
	_, held = n.Link().SparseStats()
	assert.Zero(t, held, "the former window's totals are forgotten")
}

func winOf(now int64, w time.Duration) string { return fmt.Sprint(now / int64(w)) }
