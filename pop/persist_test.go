package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

func admitAll(t *testing.T, n *Node, now int64, rule, key string, times int) {
	t.Helper()
	for range times {
		d, err := n.Decide(now, rule, key, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
}

// A node alone in its PoP restarts from its Snapshot: every scope goes on
// where it stopped, global counts as its former epoch's aggregate.
func TestSnapshotRestoreLoneNode(t *testing.T) {
	old := newNode(t, replica("a", 1))
	old.Link().SetEpoch(1)
	admitAll(t, old, t0, "api", "k", 7)
	admitAll(t, old, t0, "per-ip", "k", 3)
	admitAll(t, old, t0, "local", "k", 4)
	// Another PoP's aggregate it held.
	other := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 9), Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: t0 / int64(time.Minute), Count: 2}}}
	require.Equal(t, 1, old.Link().Apply(t0, &other, ScopeGlobal).Merged)

	snap := old.Snapshot(t0)
	var senders []string
	for _, d := range snap {
		senders = append(senders, d.Sender.String())
	}
	assert.Equal(t, []string{"eu/ams/*#1", "eu/ams/a#1", "us/iad/*#9"}, senders)
	for _, d := range snap {
		for _, e := range d.Entries {
			if !d.Sender.IsPoP() {
				assert.NotEqual(t, "api", e.Rule, "global counts are kept as aggregates only")
			}
		}
	}

	now := t0 + int64(100*time.Millisecond)
	n := newNode(t, replica("a", 2))
	st := n.Restore(now, snap)
	assert.Zero(t, st.Rejected())
	n.Link().SetEpoch(2)
	assert.InDelta(t, 9, estimate(t, n, now, "api", "k"), 0.01, "own 7 and iad's 2")
	assert.InDelta(t, 3, estimate(t, n, now, "per-ip", "k"), 0.3)
	assert.InDelta(t, 4, estimate(t, n, now, "local", "k"), 0.4)
	// The restored node does not publish its former counts under its new
	// epoch: the other PoPs hold them under the former one.
	b := n.Link().Flush(now, nil)
	assert.Empty(t, b.PoP.Entries)
	// A fresher relay of the former epoch's totals (counts admitted after
	// the snapshot) raises them: it is not taken for an echo.
	relay := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: t0 / int64(time.Minute), Count: 8}}}
	assert.Equal(t, 1, n.Link().Apply(now, &relay, ScopeGlobal).Merged)
	assert.InDelta(t, 10, estimate(t, n, now, "api", "k"), 0.01)
	// Restoring again changes nothing.
	n.Restore(now, snap)
	assert.InDelta(t, 10, estimate(t, n, now, "api", "k"), 0.01)
}

// Restore drops windows that passed and refuses what a snapshot cannot
// hold; nothing of it panics.
func TestRestoreRefuses(t *testing.T) {
	n := newNode(t, replica("a", 2))
	w := t0 / int64(time.Minute)
	tests := []struct {
		name  string
		d     wire.Delta
		check func(t *testing.T, st ApplyStats)
	}{
		{"expired window", wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: w - 5, Count: 3}}},
			func(t *testing.T, st ApplyStats) { assert.Equal(t, 1, st.Stale) }},
		{"global per node", wire.Delta{Sender: replica("a", 1), Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: w, Count: 3}}},
			func(t *testing.T, st ApplyStats) { assert.Equal(t, 1, st.WrongScope) }},
		{"another node's node scope", wire.Delta{Sender: replica("b", 1), Entries: []crdt.Entry{{Rule: "local", Key: "k", Window: t0 / int64(time.Second), Count: 3}}},
			func(t *testing.T, st ApplyStats) { assert.Equal(t, 1, st.WrongScope) }},
		{"another pop's node", wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "a", Incarnation: 1}, Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: w, Count: 3}}},
			func(t *testing.T, st ApplyStats) { assert.Equal(t, 1, st.WrongScope) }},
		{"this incarnation", wire.Delta{Sender: replica("a", 2), Entries: []crdt.Entry{{Rule: "per-ip", Key: "k", Window: w, Count: 3}}},
			func(t *testing.T, st ApplyStats) { assert.Equal(t, 1, st.Echo) }},
		{"unknown rule", wire.Delta{Sender: replica("a", 1), Entries: []crdt.Entry{{Rule: "gone", Key: "k", Window: w, Count: 3}}},
			func(t *testing.T, st ApplyStats) { assert.Equal(t, 1, st.UnknownRule) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, n.Restore(t0, []wire.Delta{tt.d}))
		})
	}
	assert.Zero(t, estimate(t, n, t0, "api", "k"))
	assert.Zero(t, estimate(t, n, t0, "per-ip", "k"))
	assert.Zero(t, estimate(t, n, t0, "local", "k"))
}

// BenchmarkSnapshot measures a state file's snapshot of 100k live keys (the
// periodic cost of state.file, every state.interval), without the writing.
func BenchmarkSnapshot(b *testing.B) {
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{{Name: "api", Limit: 1000, Window: time.Minute, Cost: 1, Scope: ScopeGlobal}}})
	require.NoError(b, err)
	n.Link().SetEpoch(1)
	for i := range 100_000 {
		_, err := n.Decide(t0, "api", "k"+strconv.Itoa(i), 1)
		require.NoError(b, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		entries := 0
		for d := range n.SnapshotEach(t0) {
			entries += len(d.Entries)
		}
		if entries != 100_000 {
			b.Fatalf("snapshot of %d entries", entries)
		}
	}
}

// TestSnapshotRestoreMultiWindow: each window of a rule of several comes
// back into its own window, for every scope (entries name windows as the
// wire does).
func TestSnapshotRestoreMultiWindow(t *testing.T) {
	for _, scope := range []Scope{ScopeGlobal, ScopePoP, ScopeNode} {
		rules := []Rule{{Name: "mw", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: scope, More: []Limit{{Limit: 1000, Window: time.Hour}}}}
		old, err := New(Config{Self: replica("a", 1), Rules: rules})
		require.NoError(t, err)
		old.Link().SetEpoch(1)
		admitAll(t, old, t0, "mw", "k", 7)

		n, err := New(Config{Self: replica("a", 2), Rules: rules})
		require.NoError(t, err)
		st := n.Restore(t0, old.Snapshot(t0))
		assert.Equal(t, 2, st.Merged, "scope %v: both windows: %+v", scope, st)
		assert.Zero(t, st.Rejected(), "scope %v", scope)
		n.Link().SetEpoch(2)
		v, err := n.View(t0, "mw", "k")
		require.NoError(t, err)
		assert.InDelta(t, 7, v.Estimate, 0.01, "scope %v: the 10s window", scope)
		require.Len(t, v.More, 1)
		assert.InDelta(t, 7, v.More[0].Estimate, 0.01, "scope %v: the hour window", scope)
	}

	// Files of earlier versions named every window of a pop-scope rule by
	// the rule's name: the first window's entries still come back.
	rules := []Rule{{Name: "mw", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopePoP, More: []Limit{{Limit: 1000, Window: time.Hour}}}}
	n, err := New(Config{Self: replica("a", 2), Rules: rules})
	require.NoError(t, err)
	old := wire.Delta{Sender: replica("a", 1), Entries: []crdt.Entry{{Rule: "mw", Key: "k", Window: t0 / int64(10*time.Second), Count: 4}}}
	assert.Equal(t, 1, n.RestoreDelta(t0, &old).Merged)
	assert.InDelta(t, 4, estimate(t, n, t0, "mw", "k"), 0.01)
}

// TestSnapshotEachStreamsInChunks: a snapshot of more keys than a chunk
// comes in several deltas per replica, none above the chunk, and restores
// the same counts as the whole snapshot; a consumer that stops early is
// yielded nothing more.
func TestSnapshotEachStreamsInChunks(t *testing.T) {
	old := newNode(t, replica("a", 1))
	old.Link().SetEpoch(1)
	keys := 2*snapshotChunk + 10
	for i := range keys {
		admitAll(t, old, t0, "api", "k"+strconv.Itoa(i), 1)
		admitAll(t, old, t0, "per-ip", "k"+strconv.Itoa(i), 1)
	}
	perSender := map[string]int{}
	deltas := 0
	n := newNode(t, replica("a", 2))
	for d := range old.SnapshotEach(t0) {
		require.LessOrEqual(t, len(d.Entries), snapshotChunk)
		perSender[d.Sender.String()] += len(d.Entries)
		deltas++
		require.Zero(t, n.RestoreDelta(t0, d).Rejected())
	}
	assert.Equal(t, map[string]int{"eu/ams/*#1": keys, "eu/ams/a#1": keys}, perSender)
	assert.Equal(t, 6, deltas, "three chunks per replica")
	n.Link().SetEpoch(2)
	for _, i := range []int{0, keys / 2, keys - 1} {
		assert.InDelta(t, 1, estimate(t, n, t0, "api", "k"+strconv.Itoa(i)), 0.01)
		assert.InDelta(t, 1, estimate(t, n, t0, "per-ip", "k"+strconv.Itoa(i)), 0.01)
	}

	seen := 0
	for range old.SnapshotEach(t0) {
		seen++
		break
	}
	assert.Equal(t, 1, seen)
}
