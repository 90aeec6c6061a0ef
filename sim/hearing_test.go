package sim

import (
	"testing"

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
