package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// TestGCRAAcrossThePoP runs two daemons of one PoP on memberlist with a
// pop-scope gcra rule: a client whose retries are spread over both nodes is
// paced as one. Two requests on one node, then the third of the burst on
// the other, and both nodes deny the fourth; a node-scope rule would have
// let the other node admit a whole burst of its own.
func TestGCRAAcrossThePoP(t *testing.T) {
	g1, g2 := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	cfg := func(id, bind, join string) string {
		p := filepath.Join(t.TempDir(), id+".yaml")
		// One request every 6 minutes, 3 at once: nothing is earned back
		// while the test runs.
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: %s, region: eu, pop: ams}
listen: {api: 127.0.0.1:0}
nats: {disabled: true}
gossip: {bind: %q, join: [%q]}
replication: {flush_interval: 20ms}
rules:
  - {name: retry, limit: 10, window: 1h, algorithm: gcra, burst: 3, scope: pop}
`, id, bind, join)), 0o600))
		return p
	}
	n1 := startDaemon(t, cfg("ams-1", g1, g2))
	defer n1.stop(t)
	n2 := startDaemon(t, cfg("ams-2", g2, g1))
	defer n2.stop(t)
	require.Eventually(t, func() bool {
		var st struct {
			Members []struct{ Name string } `json:"members"`
		}
		getJSON(t, n1.api+"/v1/status", &st)
		return len(st.Members) == 1
	}, 10*time.Second, poll, "the two nodes form one PoP")

	check := func(d *daemon) (int, map[string]any) {
		t.Helper()
		code, body := post(t, d.api+"/v1/check", `{"rule":"retry","key":"client-1"}`)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &m), body)
		return code, m
	}
	for range 2 {
		code, _ := check(n1)
		require.Equal(t, http.StatusOK, code)
	}
	require.Eventually(t, func() bool { return keyTotal(t, n2.api, "retry", "client-1") == 2 }, 10*time.Second, poll,
		"n1's admissions reach n2")
	code, m := check(n2)
	require.Equal(t, http.StatusOK, code, "the third of the burst")
	assert.EqualValues(t, 0, m["remaining"])
	code, m = check(n2)
	require.Equal(t, http.StatusTooManyRequests, code, "the burst is spent on the PoP, not on n2")
	assert.InDelta(t, 6*60*1000, m["retry_after_ms"], 2000, "the next request fits one interval on")

	require.Eventually(t, func() bool { return keyTotal(t, n1.api, "retry", "client-1") == 3 }, 10*time.Second, poll,
		"n2's admission reaches n1")
	code, _ = check(n1)
	assert.Equal(t, http.StatusTooManyRequests, code, "n1 paces by n2's admission too")
	code, _ = check(n2)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, uint64(3), keyTotal(t, n1.api, "retry", "client-1"), "denials spend nothing")
}
