package pop

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// regionFlush returns the region totals FlushRegion publishes at now, by
// key, and checks their sender.
func regionFlush(t *testing.T, n *Node, now int64, owns func(string) bool, epoch uint64) map[string]uint64 {
	t.Helper()
	d := n.Link().FlushRegion(now, owns)
	assert.Equal(t, identity.RegionReplica("eu", epoch), d.Sender)
	out := map[string]uint64{}
	for _, e := range d.Entries {
		out[e.Key] = e.Count
	}
	return out
}

// A node of its region's voice PoP publishes the region total of each key
// whose total moved, by its own decisions or a merge of another PoP of the
// region: its count plus the region's PoP totals, never another region's.
func TestFlushRegion(t *testing.T) {
	n := sparseNode(t, time.Minute)
	now := int64(time.Hour)
	fra := identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 3)
	iad := identity.RegionReplica("us", 4)
	win := now / int64(time.Minute)
	apply := func(from identity.Replica, key string, count uint64) {
		n.Link().ApplyFrom(now, &wire.Delta{Sender: from, SentAt: now, Epoch: from.Incarnation,
			Entries: []crdt.Entry{{Rule: "api", Key: key, Window: win, Count: count}}}, ScopeGlobal, nil)
	}

	// Not the voice: nothing is noted.
	admitN(t, n, now, "api", "a", 2)
	n.Link().Flush(now, nil)
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries)

	n.Link().SetRegionVoice(true, 0)
	admitN(t, n, now, "api", "b", 3)
	n.Link().Flush(now, nil)
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries, "no region epoch yet")
	n.Link().SetRegionVoice(true, 7)
	assert.Equal(t, map[string]uint64{"b": 3}, regionFlush(t, n, now, nil, 7), "kept until the epoch is known")

	apply(fra, "a", 10) // another PoP of the region
	apply(iad, "c", 50) // another region: not part of the region's total
	n.Link().Flush(now, nil)
	assert.Equal(t, map[string]uint64{"a": 12}, regionFlush(t, n, now, nil, 7))
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries, "nothing moved")

	// Owned keys only; the others' marks are cleared all the same.
	admitN(t, n, now, "api", "a", 1)
	admitN(t, n, now, "api", "b", 1)
	n.Link().Flush(now, nil)
	assert.Equal(t, map[string]uint64{"b": 4}, regionFlush(t, n, now, func(k string) bool { return k == "b" }, 7))
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries)

	// Every live region total, for anti-entropy.
	all := map[string]uint64{}
	for _, e := range n.Link().RegionAntiEntropyPart(now, nil, 0, 1, false).Entries {
		all[e.Key] = e.Count
	}
	assert.Equal(t, map[string]uint64{"a": 13, "b": 4}, all)

	// No longer the voice: forgets what it noted.
	admitN(t, n, now, "api", "b", 1)
	n.Link().Flush(now, nil)
	n.Link().SetRegionVoice(false, 7)
	n.Link().SetRegionVoice(true, 7)
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries)
}

// Region totals far below their limit go out sparsely, like PoP totals.
func TestFlushRegionSparse(t *testing.T) {
	n := sparseNode(t, time.Minute)
	now := int64(time.Hour)
	n.Link().SetRegionVoice(true, 7)
	n.Link().SetRegionSparse(2, 50*time.Millisecond) // step 1000/8 = 125
	admitN(t, n, now, "api", "a", 5)
	n.Link().Flush(now, nil)
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries, "moved by less than a step")
	admitN(t, n, now, "api", "a", 120)
	n.Link().Flush(now, nil)
	require.Equal(t, map[string]uint64{"a": 125}, regionFlush(t, n, now, nil, 7), "moved by a step")
	admitN(t, n, now, "api", "a", 100)
	n.Link().Flush(now, nil)
	assert.Empty(t, n.Link().FlushRegion(now, nil).Entries, "less than a step since published")
	admitN(t, n, now, "api", "a", 30) // 255: past a quarter of the limit, every change
	n.Link().Flush(now, nil)
	assert.Equal(t, map[string]uint64{"a": 255}, regionFlush(t, n, now, nil, 7))
}
