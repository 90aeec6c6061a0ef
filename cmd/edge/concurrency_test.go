package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
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

// inFlightMerged reads geolimit_replication_in_flight_counts_total
// {result="merged"} from the daemon's /metrics: members' counts taken in.
func inFlightMerged(t *testing.T, api string) int {
	t.Helper()
	res, err := http.Get(api + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^geolimit_replication_in_flight_counts_total\{result="merged"\} (\d+)$`).FindSubmatch(b)
	require.NotNil(t, m, "no geolimit_replication_in_flight_counts_total")
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

// TestConcurrencyProxyAcrossThePoP: requests in flight through one node's
// proxy hold the PoP's slots on the other node too, for as long as they
// are in flight (past lease_ttl: their holder is alive and re-sends its
// count), and come back to the other node when the holder is killed.
func TestConcurrencyProxyAcrossThePoP(t *testing.T) {
	const ttl = 2 * time.Second
	release := make(chan struct{})
	var upstreamIn atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamIn.Add(1)
		defer upstreamIn.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	g1, g2 := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	cfg := func(id, bind, join string) string {
		p := filepath.Join(t.TempDir(), id+".yaml")
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: %s, region: eu, pop: ams}
listen: {api: 127.0.0.1:0, proxy: 127.0.0.1:0}
proxy: {upstream: %q}
nats: {disabled: true}
gossip: {bind: %q, join: [%q]}
replication: {flush_interval: 20ms}
rules:
  - {name: uploads, kind: concurrency, limit: 3, lease_ttl: %s, key: ip}
`, id, up.URL, bind, join, ttl)), 0o600))
		return p
	}
	n1 := startDaemon(t, cfg("ams-1", g1, g2))
	defer n1.stop(t)
	n2 := startChild(t, cfg("ams-2", g2, g1))
	proxy2 := waitOutput(t, n2.out, `proxy listening on (http://\S+)`, "the second node's proxy")
	require.Eventually(t, func() bool {
		var st struct {
			Members []struct{ Name string } `json:"members"`
		}
		getJSON(t, n1.api+"/v1/status", &st)
		return len(st.Members) == 1
	}, 10*time.Second, poll, "the two nodes form one PoP")

	for range 2 {
		go func() {
			if res, err := http.Get(proxy2 + "/upload"); err == nil {
				res.Body.Close()
			}
		}()
	}
	require.Eventually(t, func() bool { return upstreamIn.Load() == 2 }, 10*time.Second, poll)
	require.Eventually(t, func() bool { _, m := slotsInUse(t, n1.api, "127.0.0.1"); return m == 2 }, 10*time.Second, poll,
		"the other node counts the requests in flight")

	// The holder re-sends its count every quarter of lease_ttl; after six
	// of them (one and a half lease_ttl) the requests, still in flight,
	// still hold their slots on the other node.
	from := inFlightMerged(t, n1.api)
	require.Eventually(t, func() bool { return inFlightMerged(t, n1.api) >= from+6 }, 20*time.Second, 20*time.Millisecond)
	_, m := slotsInUse(t, n1.api, "127.0.0.1")
	assert.Equal(t, 2, m, "a live holder's slots do not lapse")
	code, _ := post(t, n1.api+"/v1/acquire", `{"rule":"uploads","key":"127.0.0.1"}`)
	require.Equal(t, http.StatusOK, code)
	code, _ = post(t, n1.api+"/v1/acquire", `{"rule":"uploads","key":"127.0.0.1"}`)
	require.Equal(t, http.StatusTooManyRequests, code, "the PoP's three slots are taken")

	n2.kill(t)
	killed := time.Now()
	require.Eventually(t, func() bool { _, m := slotsInUse(t, n1.api, "127.0.0.1"); return m == 0 }, ttl+5*time.Second, 20*time.Millisecond,
		"the killed node's requests no longer hold slots")
	t.Logf("the killed proxy's slots came back after %s (lease_ttl %s)", time.Since(killed).Round(time.Millisecond), ttl)
	code, _ = post(t, n1.api+"/v1/acquire", `{"rule":"uploads","key":"127.0.0.1"}`)
	assert.Equal(t, http.StatusOK, code)
}
