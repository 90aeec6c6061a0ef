package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// TestGCRAAcrossRegions runs two daemons in two regions, each with an
// embedded nats-server, linked by gateways, and a global gcra rule keyed by
// client IP. A client that spends the first of its burst through the proxy
// in us, in front of a real upstream, and the rest on the decision API in
// eu, is denied in eu and then paced by the proxy in us: 429 with the
// Retry-After of us's own TAT, and the upstream never sees the request.
func TestGCRAAcrossRegions(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	gwEU, gwUS := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	proxyUS := gossiptest.FreeAddr(t)
	cfg := func(region, pop, gw, other, otherGW, extra string) string {
		p := filepath.Join(t.TempDir(), region+".yaml")
		// One request every 6 minutes, 3 at once: nothing is earned back
		// while the test runs.
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: %[2]s-1, region: %[1]s, pop: %[2]s}
listen: {api: 127.0.0.1:0%[7]s}
proxy: {upstream: %[8]q}
nats:
  embedded:
    listen: %[9]s
    gateway:
      name: %[1]s
      listen: %[3]s
      gateways: [{name: %[4]s, urls: ["nats://%[5]s"]}]
replication: {flush_interval: 20ms, peer_timeout: 2s, expected_pops: [%[6]s]}
rules:
  - {name: pace, key: ip, limit: 10, window: 1h, algorithm: gcra, burst: 3, scope: global}
`, region, pop, gw, other, otherGW, other+"/"+map[string]string{"eu": "ams", "us": "iad"}[other], extra, up.URL, gossiptest.FreeAddr(t))), 0o600))
		return p
	}
	eu := startDaemon(t, cfg("eu", "ams", gwEU, "us", gwUS, ""))
	defer eu.stop(t)
	us := startDaemon(t, cfg("us", "iad", gwUS, "eu", gwEU, ", proxy: "+proxyUS))
	defer us.stop(t)
	require.Eventually(t, func() bool {
		for _, d := range []*daemon{eu, us} {
			var st struct {
				RemotePoPs []struct{ Partitioned bool } `json:"remote_pops"`
			}
			getJSON(t, d.api+"/v1/status", &st)
			if len(st.RemotePoPs) != 1 || st.RemotePoPs[0].Partitioned {
				return false
			}
		}
		return true
	}, 20*time.Second, poll, "each region hears the other")

	check := func(d *daemon) (int, map[string]any) {
		t.Helper()
		code, body := post(t, d.api+"/v1/check", `{"rule":"pace","key":"127.0.0.1"}`)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &m), body)
		return code, m
	}
	get := func() *http.Response {
		t.Helper()
		res, err := http.Get("http://" + proxyUS + "/api/x")
		require.NoError(t, err)
		res.Body.Close()
		return res
	}
	require.Equal(t, http.StatusOK, get().StatusCode, "the first request of the burst, through us's proxy")
	require.EqualValues(t, 1, hits.Load())
	require.Eventually(t, func() bool { return keyTotal(t, eu.api, "pace", "127.0.0.1") == 1 }, 10*time.Second, poll,
		"us's admission reaches eu")
	for range 2 {
		code, _ := check(eu)
		require.Equal(t, http.StatusOK, code)
	}
	code, m := check(eu)
	require.Equal(t, http.StatusTooManyRequests, code, "the burst is spent, one request in us and two in eu")
	assert.InDelta(t, 6*60*1000, m["retry_after_ms"], 2000)

	require.Eventually(t, func() bool { return keyTotal(t, us.api, "pace", "127.0.0.1") == 3 }, 10*time.Second, poll,
		"eu's admissions reach us")
	res := get()
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "us's proxy paces the client by eu's spend")
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
	assert.InDelta(t, 6*60, retry, 2, "one interval from us's TAT")
	assert.EqualValues(t, 1, hits.Load(), "the upstream never saw the paced request")
	assert.Equal(t, uint64(3), keyTotal(t, eu.api, "pace", "127.0.0.1"), "denials spend nothing")
}
