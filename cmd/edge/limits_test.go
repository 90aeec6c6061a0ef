package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeveralWindowsAndOverridesInAPoP runs two daemons of one PoP
// (memberlist on loopback, one embedded NATS server) and one of another PoP
// (NATS): the counts of every window of a rule of several replicate between
// the members and, for a global rule, to the other PoP, and an override
// reloaded on one node applies there at once. (The near-limit allowance
// is off: it would split the last units between the two nodes.)
func TestSeveralWindowsAndOverridesInAPoP(t *testing.T) {
	ports := examplePorts{}
	nats, g1, g2 := ports.addr(t, "nats"), ports.addr(t, "g1"), ports.addr(t, "g2")
	rules := func(overrides string) string {
		return `
rules:
  - name: twin
    limits: [{limit: 100, window: 1h}, {limit: 6, window: 2h}]
    scope: pop
  - name: gtwin
    limits: [{limit: 100, window: 1h}, {limit: 6, window: 2h}]
    scope: global
  - name: plan
    limit: 2
    window: 1h
    scope: pop` + overrides + `
replication: {flush_interval: 20ms, peer_timeout: 2s, near_limit_allowance: false}
`
	}
	cfg1 := fmt.Sprintf("node: {id: ams-1, region: eu, pop: ams}\nlisten: {api: %q}\nnats: {embedded: {listen: %q}}\ngossip: {bind: %q, join: [%q]}\n",
		ports.addr(t, "api1"), nats, g1, g2) + rules("")
	cfg2 := fmt.Sprintf("node: {id: ams-2, region: eu, pop: ams}\nlisten: {api: %q}\nnats: {url: %q}\ngossip: {bind: %q, join: [%q]}\n",
		ports.addr(t, "api2"), "nats://"+nats, g2, g1)
	cfg3 := fmt.Sprintf("node: {id: fra-1, region: eu, pop: fra}\nlisten: {api: %q}\nnats: {url: %q}\n", ports.addr(t, "api3"), "nats://"+nats) + rules("")
	p1 := writeFile(t, cfg1)
	p2 := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(p2, []byte(cfg2+rules("")), 0o600))
	a := startDaemon(t, p1)
	defer a.stop(t)
	b := startDaemon(t, p2, "-watch-interval", "20ms")
	defer b.stop(t)
	c := startDaemon(t, writeFile(t, cfg3))
	defer c.stop(t)
	require.Eventually(t, func() bool {
		var st struct {
			Members []struct{ Name string } `json:"members"`
		}
		getJSON(t, a.api+"/v1/status", &st)
		return len(st.Members) == 1
	}, 10*time.Second, poll, "the two nodes are members of one PoP")
	require.Eventually(t, func() bool {
		for _, d := range []*daemon{a, c} {
			var st struct {
				RemotePoPs []struct{ Partitioned bool } `json:"remote_pops"`
			}
			getJSON(t, d.api+"/v1/status", &st)
			if len(st.RemotePoPs) != 1 || st.RemotePoPs[0].Partitioned {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "the PoPs hear each other")
	for range 4 {
		code, body := post(t, a.api+"/v1/check", `{"rule":"gtwin","key":"k"}`)
		require.Equal(t, http.StatusOK, code, body)
	}
	require.Eventually(t, func() bool { return keyTotal(t, c.api, "gtwin", "k") == 4 }, 10*time.Second, poll, "the first window's PoP total reaches the other PoP")
	admitted := 0
	for range 4 {
		if code, _ := post(t, c.api+"/v1/check", `{"rule":"gtwin","key":"k"}`); code == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 2, admitted, "ams's 4 count in fra's 2h window")

	for range 4 {
		code, body := post(t, a.api+"/v1/check", `{"rule":"twin","key":"k"}`)
		require.Equal(t, http.StatusOK, code, body)
	}
	require.Eventually(t, func() bool { return keyTotal(t, b.api, "twin", "k") == 4 }, 10*time.Second, poll, "the first window's counts reach the other node")
	// The second window (2h, limit 6) replicated too: b admits 2 more.
	admitted = 0
	for range 4 {
		if code, _ := post(t, b.api+"/v1/check", `{"rule":"twin","key":"k"}`); code == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 2, admitted, "a's 4 count in b's 2h window")

	for range 2 {
		code, body := post(t, b.api+"/v1/check", `{"rule":"plan","key":"vip"}`)
		require.Equal(t, http.StatusOK, code, body)
	}
	code, _ := post(t, b.api+"/v1/check", `{"rule":"plan","key":"vip"}`)
	require.Equal(t, http.StatusTooManyRequests, code)
	tmp := p2 + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(cfg2+rules("\n    overrides: [{key: vip, limit: 5}]")), 0o600))
	require.NoError(t, os.Rename(tmp, p2))
	require.Eventually(t, func() bool {
		var st struct {
			Rules []struct {
				Name      string `json:"name"`
				Overrides int    `json:"overrides"`
			} `json:"rules"`
		}
		getJSON(t, b.api+"/v1/status", &st)
		for _, r := range st.Rules {
			if r.Name == "plan" && r.Overrides == 1 {
				return true
			}
		}
		return false
	}, 10*time.Second, poll, "b reloads the override")
	admitted = 0
	for range 4 {
		if code, _ := post(t, b.api+"/v1/check", `{"rule":"plan","key":"vip"}`); code == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 3, admitted, "the override applies at once, on top of the 2 counted")
	// a has no override: b's count of 5 is more than a replica may admit
	// under a's rule, and is clamped to a's limit.
	require.Eventually(t, func() bool { return keyTotal(t, a.api, "plan", "vip") == 2 }, 10*time.Second, poll, "b's count reaches a, clamped")
	code, _ = post(t, a.api+"/v1/check", `{"rule":"plan","key":"vip"}`)
	assert.Equal(t, http.StatusTooManyRequests, code, "the node without the override keeps the rule's limit")
}
