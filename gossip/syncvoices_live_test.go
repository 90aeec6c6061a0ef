package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// With region voices a sync request reaches the nodes of its sender's
// region and, of every other region, the node whose PoP speaks for it:
// on a real three-region super-cluster, a request published by a PoP of eu
// reaches us's voice (us1) and not us2, while a request of us reaches us2.
// Per node, sync requests then grow with the PoPs of its region, not with
// every node of the fleet.
func TestRegionVoicesSyncReachesTheVoiceOnly(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us", "ap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := startRVNodes(t, ctx, c, true, 50*time.Millisecond,
		rvPoP{0, "eu1", 1}, rvPoP{0, "eu2", 1}, rvPoP{1, "us1", 1}, rvPoP{1, "us2", 1}, rvPoP{2, "ap1", 1})
	waitVoices(t, nodes)
	byName := map[string]*rvNode{}
	for _, n := range nodes {
		byName[n.id.PoP] = n
	}
	voice, other := byName["us1"], byName["us2"]
	transport := func(n *rvNode) *NATS {
		n.rep.sendMu.Lock()
		defer n.rep.sendMu.Unlock()
		return n.rep.globT.(*NATS)
	}
	speaks := func(n *rvNode) bool {
		t := transport(n)
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.speaks
	}
	require.Eventually(t, func() bool { return speaks(voice) && !speaks(other) }, 10*time.Second, poll,
		"us1 hears every region's sync requests, us2 its own region's")
	// us2's server has its subscriptions as they are now.
	require.NoError(t, transport(other).nc.Flush())

	probe, err := nats.Connect(c.ClientURL(0))
	require.NoError(t, err)
	defer probe.Close()
	request := func(from identity.PoPID) []byte {
		msgs, err := wire.Encode(&wire.Delta{Sender: identity.Replica{PoPID: from, Node: "probe", Incarnation: 1},
			SentAt: time.Now().UnixNano()}, wire.MaxDeltaBytes)
		require.NoError(t, err)
		return msgs[0]
	}
	far := tapKey{other: true, kind: KindSync}
	near := tapKey{other: false, kind: KindSync}
	before := other.tap.snapshot()[far]
	eu2 := identity.PoPID{Region: "eu", PoP: "eu2"}
	got := voice.tap.snapshot()[far]
	require.Eventually(t, func() bool {
		require.NoError(t, probe.Publish(SyncSubject("", eu2), request(eu2)))
		return voice.tap.snapshot()[far] > got
	}, 10*time.Second, 20*time.Millisecond, "the voice of us hears a sync request of eu")
	// A request of us's own, published after eu's on the same connection
	// through the same gateway: once us2 has it, eu's would have arrived.
	us1 := identity.PoPID{Region: "us", PoP: "us1"}
	near0 := other.tap.snapshot()[near]
	require.NoError(t, probe.Publish(SyncSubject("", us1), request(us1)))
	require.Eventually(t, func() bool { return other.tap.snapshot()[near] > near0 }, 10*time.Second, poll,
		"us2 hears a sync request of its region")
	assert.Equal(t, before, other.tap.snapshot()[far], "us2 heard no sync request of another region")
}
