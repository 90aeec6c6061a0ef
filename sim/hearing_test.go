package sim

import (
	"testing"

	"github.com/geolimit/geolimit/crdt"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The engine's heartbeats decide which PoPs each node hears, and every
// change reaches the node core, which reports it in its partition status.
func TestHearingReachesTheNode(t *testing.T) {
	sc := mustParse(t, twoSides) // partition at 5s, heal at 35s, peer_timeout 500ms
	e, err := newEngine(sc, Options{Policy: "share"})
	require.NoError(t, err)

	runUntil := func(at int64) {
		e.end = at
		require.NoError(t, e.run())
	}
	unheard := func(name string) []string {
		for _, nd := range e.nodes {
			if nd.name == name {
				return nd.n.Partition(e.nodeNow(nd, e.now)).Unheard
			}
		}
		t.Fatalf("no node %s", name)
		return nil
	}

	runUntil(4_900e6)
	assert.Empty(t, unheard("ams-1"), "healthy: every PoP heard")
	runUntil(5_400e6)
	assert.Empty(t, unheard("ams-1"), "not yet peer_timeout after the cut")
	runUntil(6_000e6)
	assert.Equal(t, []string{"us/iad"}, unheard("ams-1"))
	assert.Equal(t, []string{"eu/ams"}, unheard("iad-2"))
	runUntil(36_000e6)
	assert.Empty(t, unheard("ams-2"), "heard again after the heal")
	assert.Empty(t, unheard("iad-1"))
}

// A heartbeat gap of more than two intervals from one sender (a cut shorter
// than peer_timeout) makes the node request a sync; duplicates and
// reordered heartbeats do not.
func TestMissedBeatsRequestSync(t *testing.T) {
	e, err := newEngine(mustParse(t, twoSides), Options{})
	require.NoError(t, err)
	nd, from := e.nodes[0], e.nodes[2]
	require.NotEqual(t, nd.pop, from.pop)
	beat := func(sentAt int64) bool {
		nd.h.syncPending = false
		nd.h.lastHeard[from.pop] = 0 // heard just now: no sync for that
		e.receive(nd, from.pop, msgHeartbeat, &crdt.Delta{Sender: from.n.Self(), SentAt: sentAt}, 1)
		return nd.h.syncPending
	}
	hb := e.hbEvery
	assert.False(t, beat(10*hb), "first heartbeat")
	assert.False(t, beat(11*hb), "next one")
	assert.False(t, beat(11*hb), "duplicate")
	assert.False(t, beat(10*hb), "reordered")
	assert.True(t, beat(14*hb), "two went missing")
}

const restartAlone = `
name: restart-alone
seed: 5
duration: 8s
topology:
  - {region: eu, pops: [{name: ams, nodes: 1}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
network:
  inter_region: {latency: 40ms}
replication: {peer_timeout: 500ms}
rules:
  - {name: api, limit: 100000, window: 10s}
traffic:
  - {rule: api, rate: 200/s, share: {ams: 1}}
events:
  - {at: 5s, restart: [ams-1]}
`

// A restarted node alone in its PoP asks the other PoPs for a sync; they
// relay back what its former incarnation counted, so its view is whole again.
func TestRelayRestoresFormerIncarnation(t *testing.T) {
	e, err := newEngine(mustParse(t, restartAlone), Options{})
	require.NoError(t, err)
	e.end = 6e9
	require.NoError(t, e.run())
	ams, iad := e.nodes[0], e.nodes[1]
	require.EqualValues(t, 2, ams.inc)
	va, err := ams.n.View(e.nodeNow(ams, e.now), "api", "k0")
	require.NoError(t, err)
	vi, err := iad.n.View(e.nodeNow(iad, e.now), "api", "k0")
	require.NoError(t, err)
	old := ams.n.Self()
	old.Incarnation = 1
	require.NotEmpty(t, vi.Windows)
	want := vi.Windows[len(vi.Windows)-1].Replicas[old.String()]
	require.Positive(t, want, "iad knows what ams-1#1 counted")
	assert.Equal(t, want, va.Windows[len(va.Windows)-1].Replicas[old.String()], "and relayed it back")
}
