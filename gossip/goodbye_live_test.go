package gossip

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
)

// TestLiveGoodbye stops (Close, as the daemon does on SIGTERM) the only
// node of eu2, a PoP of eu, and of us1, the only PoP of us, over real NATS
// servers linked by gateways, with region voices off and on: eu1 takes
// both for down, not cut off (its share policy lists no unheard PoP while
// it counts them partitioned), from their goodbyes.
func TestLiveGoodbye(t *testing.T) {
	for _, voices := range []bool{false, true} {
		t.Run(fmt.Sprintf("voices=%v", voices), func(t *testing.T) {
			c := gossiptest.StartSuperCluster(t, "eu", "us")
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			nodes := startRVNodes(t, ctx, c, voices, 20*time.Millisecond, rvPoP{0, "eu1", 1}, rvPoP{0, "eu2", 1}, rvPoP{1, "us1", 1})
			if voices {
				waitVoices(t, nodes)
			}
			eu1 := nodes[0]
			for _, n := range nodes[1:] {
				require.NoError(t, n.rep.Close())
			}
			// Taken for cut off, they would stay unheard: only their goodbyes
			// take them for down (a goodbye that comes after a PoP timed out,
			// its node slowed down by the machine's load, still does).
			require.Eventually(t, func() bool {
				return slices.Equal(eu1.rep.Partitioned(), []identity.PoPID{nodes[1].id, nodes[2].id}) &&
					len(eu1.node.Partition(time.Now().UnixNano()).Unheard) == 0
			}, 10*time.Second, poll, "both stopped PoPs partitioned, down, not cut off")
			assert.GreaterOrEqual(t, eu1.rep.Status().Protocol.GoodbyesHeard, uint64(2)) // a region mate's on both subjects
			for _, n := range nodes[1:] {
				assert.EqualValues(t, 1, n.rep.Status().Protocol.Goodbyes, n.name)
			}
		})
	}
}
