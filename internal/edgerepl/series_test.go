package edgerepl_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// Heartbeats of 500 invented PoPs on the node's open NATS server add a
// bounded number of series labelled by PoP to its metrics (128 PoPs at
// most, the expected ones and those whose counts were merged first), while
// status lists them all.
func TestInventedPoPsAddBoundedSeries(t *testing.T) {
	ams := startEdge(t, `
node: {id: ams-1, region: eu, pop: ams}
listen: {api: "127.0.0.1:0"}
nats: {embedded: {listen: "127.0.0.1:-1"}}
replication: {flush_interval: 20ms, peer_timeout: 1s, startup_sync: 0s, expected_pops: [us/iad]}
rules: [{name: api, limit: 100, window: 10s, scope: global}]
`, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, 0)
	api := "http://" + ams.APIAddr().String()
	nc, err := nats.Connect(ams.NATSURL())
	require.NoError(t, err)
	defer nc.Close()
	now := time.Now().UnixNano()
	for i := range 500 {
		p := identity.PoPID{Region: "x", PoP: fmt.Sprintf("p%03d", i)}
		b, err := wire.Encode(&wire.Delta{Sender: identity.Replica{PoPID: p, Node: "n", Incarnation: 1}, SentAt: now}, 1<<20)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(gossip.HeartbeatSubject("", p), b[0]))
	}
	require.NoError(t, nc.Flush())
	series := func(metrics, name string) int {
		n := 0
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, name+"{") {
				n++
			}
		}
		return n
	}
	var metrics string
	require.Eventually(t, func() bool {
		metrics = get(t, api+"/metrics")
		return strings.Contains(metrics, "geolimit_replication_remote_pops 501")
	}, 10*time.Second, 20*time.Millisecond, "the invented PoPs are heard")
	heard, offsets := series(metrics, "geolimit_replication_last_heard_seconds"), series(metrics, "geolimit_peer_clock_offset_seconds")
	t.Logf("500 invented PoPs: %d last-heard and %d clock offset series", heard, offsets)
	assert.LessOrEqual(t, heard, 128)
	assert.LessOrEqual(t, offsets, 128)
	assert.NotContains(t, metrics, `geolimit_replication_last_heard_seconds{pop="iad",region="us"}`, "never heard: no age")
	assert.Contains(t, get(t, api+"/v1/status"), `"pop":"p499"`, "status lists every PoP")
}
