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

// TestInventedIncarnationsFillOnlyTheirSendersPart sends, through Apply,
// 70 000 tiny deltas each from another invented epoch of one PoP's
// aggregate, and as many from invented incarnations and node names of the
// own PoP's members: the table of replicas is the store's (65 536), and
// neither sender may fill it for the others: another PoP's new epoch still
// merges. The flooding PoP's own real restart is refused while the flood's
// counts are live and merges once they have passed.
func TestInventedIncarnationsFillOnlyTheirSendersPart(t *testing.T) {
	n := newNode(t, replica("a", 1))
	w := t0 / int64(time.Minute)
	entry := func(key string) []crdt.Entry {
		return []crdt.Entry{{Rule: "api", Key: key, Window: w, Count: 1}}
	}
	const flood = 70000
	for i := range uint64(flood) {
		n.Link().Apply(t0, &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 1+i), Entries: entry("k")}, ScopeGlobal)
		node := "b"
		if i%2 == 1 {
			node = "x" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		}
		n.Link().Apply(t0, &wire.Delta{Sender: replica(node, 1+i), Entries: entry("m")}, ScopePoP)
	}
	st := n.Stats().Store
	t.Logf("after %d invented epochs and %d invented members: %d replicas interned, %d refused", flood, flood, st.Replicas, st.ReplicasRefused)
	assert.LessOrEqual(t, st.Replicas, 1+crdt.DefaultMaxReplicasPerPoP+crdt.DefaultMaxIncarnations)

	// Another PoP's new epoch merges.
	a := n.Link().Apply(t0, &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 7), Entries: entry("k")}, ScopeGlobal)
	assert.Equal(t, 1, a.Merged, "another PoP's counts")
	assert.Equal(t, 0, a.Full)

	// The flooding PoP's real restart: refused while its invented epochs
	// hold live counts, merged once they have passed.
	real := &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 1<<62), Entries: entry("k2")}
	require.Equal(t, 1, n.Link().Apply(t0, real, ScopeGlobal).Full)
	later := t0 + 3*int64(time.Minute)
	n.Tick(later)
	real.Entries[0].Window = later / int64(time.Minute)
	assert.Equal(t, 1, n.Link().Apply(later, real, ScopeGlobal).Merged, "a real restart gets its place back")
}
