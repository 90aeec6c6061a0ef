package gossip

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// A peer of a newer version, which knows one more section kind, publishes
// its PoP's totals with a section of that kind between them, across real
// nats-servers linked by a gateway: this node skips the section it does
// not know, counts it, and merges every count (a rolling upgrade).
func TestMixedVersionPeer(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal}}
	old := startMember(t, ctx, newNode(t, "eu", "ams", "ams-1", rules), Options{
		Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour},
		Global:   NATSConnect(NATSConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "ams-1", URL: c.ClientURL(0)}),
	})
	nc := attacker(t, c.ClientURL(1))
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	newer := func(now int64) []byte {
		var body, msg bytes.Buffer
		enc := msgpack.NewEncoder(&body)
		require.NoError(t, enc.Encode([]any{[]any{"api", now / int64(time.Minute), []any{"alice", 0, 7}}}))
		enc = msgpack.NewEncoder(&msg)
		require.NoError(t, enc.Encode([]any{wire.EnvelopeVersion, []any{iad.Region, iad.PoP, identity.PoPNode, 5}, now, 5,
			[]any{uint64(wire.SectionCounts), body.Bytes(), 250, []byte("a feature from a later version")}}))
		return msg.Bytes()
	}
	require.Eventually(t, func() bool {
		require.NoError(t, nc.Publish(DeltaSubject("", iad), newer(time.Now().UnixNano())))
		return total(old.node, "api", "alice") == 7
	}, 10*time.Second, 20*time.Millisecond, "the newer peer's counts merge")
	st := globalStats(old.rep.Status())
	assert.Positive(t, st.UnknownSections, "the unknown section is counted")
	assert.Zero(t, st.DecodeErrors, "and is no decode error")
}
