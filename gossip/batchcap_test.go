package gossip_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/memhub"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// TestFlushWhenBatchFull: with a flush interval far longer than the test, a
// batch that reaches MaxBatchEntries still goes out at once.
func TestFlushWhenBatchFull(t *testing.T) {
	hub := memhub.New(1)
	defer hub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := gossip.Options{Settings: repl.Settings{FlushInterval: time.Hour, AntiEntropyInterval: time.Hour, PeerTimeout: 2 * time.Hour, MaxBatchEntries: 100}}
	var ms []*member
	for _, p := range []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}} {
		o := opts
		o.PoP = hub.PoP(p, p.PoP+"-1")
		o.Global = hub.Global(p, p.PoP+"-1")
		ms = append(ms, startMember(t, ctx, newNode(t, p.Region, p.PoP, p.PoP+"-1", testRules()), o))
	}
	// Let the start-up exchange (heartbeats, the re-send when a PoP is first
	// heard) finish, so that only a flush can carry what follows.
	require.Eventually(t, func() bool {
		return len(ms[0].rep.Heard()) == 1 && len(ms[1].rep.Heard()) == 1
	}, 10*time.Second, poll, "both PoPs hear each other")
	now := time.Now().UnixNano()
	for i := range 50 {
		_, err := ms[0].node.Decide(now, "api", "k"+strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	assert.Equal(t, 50, ms[0].node.Link().Pending())
	for i := 50; i < 150; i++ {
		_, err := ms[0].node.Decide(now, "api", "k"+strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	// The loop may look while the keys past the hundredth are still being
	// decided: it sends what it holds then, and keeps the rest (fewer than
	// the cap) for the next flush an hour away. At least a full batch goes
	// out, whichever.
	require.Eventually(t, func() bool { return ms[0].node.Link().Pending() < 100 }, 10*time.Second, poll, "the full batch flushed early")
	require.Eventually(t, func() bool {
		arrived := 0
		for i := range 150 {
			arrived += int(total(ms[1].node, "api", "k"+strconv.Itoa(i)))
		}
		return arrived >= 100 && total(ms[1].node, "api", "k0") == 1
	}, 10*time.Second, poll, "and arrived")
}
