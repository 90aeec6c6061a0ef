package edgerepl_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/internal/edgerepl"
	"github.com/geolimit/geolimit/server"
)

// aheadClock is the real clock, off by a fixed offset.
type aheadClock time.Duration

func (c aheadClock) Now() int64 { return time.Now().UnixNano() + int64(c) }

func startEdge(t *testing.T, yaml string, self identity.Replica, clk aheadClock) *server.App {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	require.NoError(t, err)
	app, err := server.New(server.Options{Config: cfg, Self: self, Clock: clk, NewReplicator: edgerepl.New, WatchInterval: -1})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, app.Shutdown(ctx))
	})
	return app
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}

// Two PoPs over a real nats-server: iad's rule "api" has another window and
// its clock runs 30s ahead. ams's status and metrics say both.
func TestDriftInStatusAndMetrics(t *testing.T) {
	const common = `
listen: {api: "127.0.0.1:0"}
replication: {flush_interval: 20ms, peer_timeout: 1s, startup_sync: 0s}
`
	ams := startEdge(t, `
node: {id: ams-1, region: eu, pop: ams}
nats: {embedded: {listen: "127.0.0.1:-1"}}
rules: [{name: api, limit: 100, window: 10s, scope: global}]
`+common, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, 0)
	startEdge(t, `
node: {id: iad-1, region: us, pop: iad}
nats: {url: "`+ams.NATSURL()+`"}
rules: [{name: api, limit: 100, window: 20s, scope: global}]
`+common, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "iad-1", Incarnation: 1}, aheadClock(30*time.Second))
	api := "http://" + ams.APIAddr().String()
	var st struct {
		Drift []struct {
			Region      string        `json:"region"`
			PoP         string        `json:"pop"`
			ClockOffset time.Duration `json:"clock_offset_ns"`
			Skewed      bool          `json:"skewed"`
			Mismatches  []struct {
				Rule         string `json:"rule"`
				WindowMS     int64  `json:"window_ms"`
				PeerWindowMS int64  `json:"peer_window_ms"`
			} `json:"rule_mismatches"`
		} `json:"drift"`
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := http.Get(api + "/v1/status")
		if !assert.NoError(c, err) {
			return
		}
		defer res.Body.Close()
		if !assert.NoError(c, json.NewDecoder(res.Body).Decode(&st)) || !assert.Len(c, st.Drift, 1, "drift reported") {
			return
		}
		assert.True(c, st.Drift[0].Skewed, "skew reported: %+v", st.Drift[0])
		assert.Len(c, st.Drift[0].Mismatches, 1, "rule mismatch reported: %+v", st.Drift[0])
	}, 10*time.Second, 20*time.Millisecond)
	d := st.Drift[0]
	assert.Equal(t, "us", d.Region)
	assert.Equal(t, "iad", d.PoP)
	assert.InDelta(t, 30, d.ClockOffset.Seconds(), 1, "offset %s", d.ClockOffset)
	assert.Equal(t, "api", d.Mismatches[0].Rule)
	assert.Equal(t, int64(10000), d.Mismatches[0].WindowMS)
	assert.Equal(t, int64(20000), d.Mismatches[0].PeerWindowMS)
	metrics := get(t, api+"/metrics")
	var err error
	assert.Contains(t, metrics, `geolimit_rule_mismatch{peer="us/iad",rule="api"} 1`)
	offset := -1.0
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, `geolimit_peer_clock_offset_seconds{peer="us/iad"} `); ok {
			offset, err = strconv.ParseFloat(v, 64)
			require.NoError(t, err)
		}
	}
	assert.InDelta(t, 30, offset, 1)
}
