package main

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// members returns the other members a daemon's /v1/status lists.
func members(t *testing.T, d *daemon) int {
	t.Helper()
	var st struct {
		Members []struct{ Name string } `json:"members"`
	}
	getJSON(t, d.api+"/v1/status", &st)
	return len(st.Members)
}

// TestGossipKeyRotationByReload rotates the gossip key of a running PoP of
// two daemons by editing their key files only (the config watcher picks the
// change up and the keys are applied to the running memberlist), in the
// documented steps: add the new key second, move it first, drop the old
// one. A node that holds only the new key joins once the others encrypt
// with it; after the old key is dropped a node that holds only the old key
// cannot join. Counts are shared at every step.
func TestGossipKeyRotationByReload(t *testing.T) {
	dir := t.TempDir()
	oldKey := base64.StdEncoding.EncodeToString([]byte("old-gossip-key-0123456789abcdef!"))
	newKey := base64.StdEncoding.EncodeToString([]byte("new-gossip-key-0123456789abcdef!"))
	ports := examplePorts{}
	addr := func(n int) string { return ports.addr(t, fmt.Sprintf("gossip-%d", n)) }
	writeKeys := func(node string, keys ...string) {
		p := filepath.Join(dir, node+".key")
		require.NoError(t, os.WriteFile(p+".tmp", []byte("# first encrypts\n"+strings.Join(keys, "\n")+"\n"), 0o600))
		require.NoError(t, os.Rename(p+".tmp", p))
	}
	start := func(n int, join ...int) *daemon {
		node := fmt.Sprintf("n%d", n)
		var js []string
		for _, j := range join {
			js = append(js, `"`+addr(j)+`"`)
		}
		cfg := fmt.Sprintf(`node: {id: %s, region: eu, pop: ams}
listen: {api: "127.0.0.1:0"}
nats: {embedded: {listen: "127.0.0.1:-1"}}
gossip:
  bind: %s
  join: [%s]
  secret_key_file: %s
replication: {flush_interval: 20ms}
rules:
  - {name: p, limit: 1000, window: 1m, scope: pop}
`, node, addr(n), strings.Join(js, ", "), filepath.Join(dir, node+".key"))
		path := filepath.Join(dir, node+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
		d := startDaemon(t, path, "-watch-interval", "20ms")
		t.Cleanup(func() { d.stop(t) })
		return d
	}
	applied := func(d *daemon) int { return strings.Count(d.errb.String(), "gossip keys applied") }

	writeKeys("n1", oldKey)
	writeKeys("n2", oldKey)
	n1 := start(1)
	n2 := start(2, 1)
	ds := []*daemon{n1, n2}
	require.Eventually(t, func() bool { return members(t, n1) == 1 && members(t, n2) == 1 }, 10*time.Second, poll, "two members")
	step := 0
	shared := func(what string) {
		t.Helper()
		step++
		key := fmt.Sprintf("198.51.100.%d", step)
		for _, d := range ds {
			code, body := post(t, d.api+"/v1/check", `{"rule":"p","key":"`+key+`"}`)
			require.Equal(t, http.StatusOK, code, body)
		}
		require.Eventually(t, func() bool {
			for _, d := range ds {
				if keyTotal(t, d.api, "p", key) != uint64(len(ds)) {
					return false
				}
			}
			return true
		}, 10*time.Second, poll, what+": counts shared")
		for _, d := range ds {
			assert.Equal(t, len(ds)-1, members(t, d), "%s: members", what)
		}
	}
	rotate := func(what string, keys ...string) {
		t.Helper()
		for i, d := range ds[:2] {
			before := applied(d)
			writeKeys(fmt.Sprintf("n%d", i+1), keys...)
			require.Eventually(t, func() bool { return applied(d) > before }, 10*time.Second, poll, what+": keys applied")
		}
		shared(what)
	}
	shared("old key")
	rotate("new key added", oldKey, newKey)
	rotate("new key first", newKey, oldKey)

	writeKeys("n3", newKey)
	n3 := start(3, 1)
	ds = append(ds, n3)
	require.Eventually(t, func() bool { return members(t, n3) == 2 && members(t, n1) == 2 }, 10*time.Second, poll, "a node with only the new key joined")
	shared("three members")

	rotate("old key dropped", newKey)
	for _, d := range ds {
		assert.NotContains(t, d.errb.String(), "take effect only at restart")
		assert.NotContains(t, d.errb.String(), "config reload failed")
	}

	writeKeys("n4", oldKey)
	n4 := start(4, 1, 2)
	assert.Zero(t, members(t, n4), "a node with only the old key joined")
	shared("after the refused join")
}

// TestOpenListenersRefused: a gossip or API listener beyond loopback without
// its secret file (and without insecure: true) does not start.
func TestOpenListenersRefused(t *testing.T) {
	for _, tt := range []struct{ extra, want string }{
		{"gossip: {bind: '0.0.0.0:7946'}\n", "gossip.secret_key_file: required when gossip.bind 0.0.0.0:7946 listens beyond loopback"},
		{"gossip: {bind: '0.0.0.0:7946', insecure: true}\n", ""},
		{"api: {insecure: false}\n", ""},
	} {
		err := run(t.Context(), []string{"-config", writeFile(t, testConfig+tt.extra), "-check-config"}, &syncBuffer{}, &syncBuffer{})
		if tt.want == "" {
			assert.NoError(t, err, tt.extra)
			continue
		}
		require.Error(t, err, tt.extra)
		assert.Contains(t, err.Error(), tt.want)
	}
	cfg := strings.Replace(testConfig, `listen: {api: "127.0.0.1:0"}`, `listen: {api: "0.0.0.0:0"}`, 1)
	err := run(t.Context(), []string{"-config", writeFile(t, cfg), "-check-config"}, &syncBuffer{}, &syncBuffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "api.token_file: required when listen.api 0.0.0.0:0 listens beyond loopback")
	require.NoError(t, run(t.Context(), []string{"-config", writeFile(t, cfg+"api: {insecure: true}\n"), "-check-config"}, &syncBuffer{}, &syncBuffer{}))
}
