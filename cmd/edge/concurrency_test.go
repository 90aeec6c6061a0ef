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

// acquire posts /v1/acquire and returns the status and the lease.
func acquire(t *testing.T, api, key string) (int, string) {
	t.Helper()
	code, body := post(t, api+"/v1/acquire", `{"rule":"uploads","key":"`+key+`"}`)
	var a struct {
		Lease string `json:"lease"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	return code, a.Lease
}

// slotsInUse reads a concurrency key's slots in use at api: the node's own
// and its PoP members'.
func slotsInUse(t *testing.T, api, key string) (own, members int) {
	t.Helper()
	var v struct {
		Own     int `json:"own"`
		Members int `json:"members"`
	}
	getJSON(t, api+"/v1/keys/uploads/"+key, &v)
	return v.Own, v.Members
}

// TestConcurrencyAcrossThePoP runs two daemons of one PoP on memberlist
// with a pop-scope concurrency rule: the PoP's slots are shared, a
// release is seen by the other node, and the slots of a node killed while
// holding them come back to the other within lease_ttl.
func TestConcurrencyAcrossThePoP(t *testing.T) {
	const ttl = 10 * time.Second
	g1, g2 := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	cfg := func(id, bind, join string) string {
		p := filepath.Join(t.TempDir(), id+".yaml")
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: %s, region: eu, pop: ams}
listen: {api: 127.0.0.1:0}
nats: {disabled: true}
gossip: {bind: %q, join: [%q]}
replication: {flush_interval: 20ms}
rules:
  - {name: uploads, kind: concurrency, limit: 3, lease_ttl: %s}
`, id, bind, join, ttl)), 0o600))
		return p
	}
	n1 := startDaemon(t, cfg("ams-1", g1, g2))
	defer n1.stop(t)
	// The second node is a process of its own, so that it can die holding
	// its slots (SIGKILL: no shutdown, no release).
	n2 := startChild(t, cfg("ams-2", g2, g1))
	api2 := waitOutput(t, n2.out, `api listening on (http://\S+)`, "the second node's API")
	require.Eventually(t, func() bool {
		var st struct {
			Members []struct{ Name string } `json:"members"`
		}
		getJSON(t, n1.api+"/v1/status", &st)
		return len(st.Members) == 1
	}, 10*time.Second, poll, "the two nodes form one PoP")

	// A release on one node frees the slot on the other.
	code, lease := acquire(t, api2, "k")
	require.Equal(t, http.StatusOK, code)
	require.Eventually(t, func() bool { _, m := slotsInUse(t, n1.api, "k"); return m == 1 }, 10*time.Second, poll,
		"the other node counts the slot")
	code, _ = post(t, api2+"/v1/release", `{"lease":"`+lease+`"}`)
	require.Equal(t, http.StatusOK, code)
	require.Eventually(t, func() bool { _, m := slotsInUse(t, n1.api, "k"); return m == 0 }, 10*time.Second, poll,
		"the release reaches the other node")

	// The second node takes two of the PoP's three slots; the first can
	// take only the third.
	for range 2 {
		code, _ := acquire(t, api2, "k")
		require.Equal(t, http.StatusOK, code)
	}
	require.Eventually(t, func() bool { _, m := slotsInUse(t, n1.api, "k"); return m == 2 }, 10*time.Second, poll)
	code, _ = acquire(t, n1.api, "k")
	require.Equal(t, http.StatusOK, code)
	code, _ = acquire(t, n1.api, "k")
	require.Equal(t, http.StatusTooManyRequests, code, "the PoP's three slots are taken")
	require.Eventually(t, func() bool { own, m := slotsInUse(t, api2, "k"); return own == 2 && m == 1 }, 10*time.Second, poll,
		"the second node counts the first's slot too")
	code, _ = acquire(t, api2, "k")
	assert.Equal(t, http.StatusTooManyRequests, code)

	// The second node dies holding its two slots: they come back to the
	// first within lease_ttl (sooner when memberlist sees it go).
	n2.kill(t)
	killed := time.Now()
	require.Eventually(t, func() bool { _, m := slotsInUse(t, n1.api, "k"); return m == 0 }, ttl+2*time.Second, 20*time.Millisecond,
		"the dead node's slots come back within lease_ttl")
	back := time.Since(killed)
	t.Logf("the dead node's slots came back after %s (lease_ttl %s)", back.Round(time.Millisecond), ttl)
	for range 2 {
		code, _ := acquire(t, n1.api, "k")
		assert.Equal(t, http.StatusOK, code)
	}
	code, _ = acquire(t, n1.api, "k")
	assert.Equal(t, http.StatusTooManyRequests, code, "the first node's own slot still counts")
}
