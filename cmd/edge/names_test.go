package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// TestCheckConfigRefusesBadNames: a region, PoP or node name the daemon
// could not run under is refused by -check-config, naming the field, and
// the daemon refuses the same file the same way.
func TestCheckConfigRefusesBadNames(t *testing.T) {
	tests := []struct{ name, node, want string }{
		{"dotted region", "{id: n1, region: eu.west, pop: ams}", `node.region: identity: bad name: "eu.west"`},
		{"wildcard pop", "{id: n1, region: eu, pop: 'ams>'}", `node.pop: identity: bad name: "ams>"`},
		{"pop with a space", "{id: n1, region: eu, pop: 'ams 2'}", `node.pop: identity: bad name: "ams 2"`},
		{"node named like an aggregate", "{id: '*', region: eu, pop: ams}", `node.id: identity: bad name: "*"`},
		{"node id with a slash", "{id: 'a/b', region: eu, pop: ams}", `node.id: identity: bad name: "a/b"`},
		{"region too long", "{id: n1, region: " + strings.Repeat("r", 65) + ", pop: ams}", "node.region: identity: bad name:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, strings.Replace(testConfig, "node: {id: n1, region: eu, pop: ams}", "node: "+tt.node, 1))
			var out bytes.Buffer
			err := run(t.Context(), []string{"-config", path, "-check-config"}, &out, io.Discard)
			require.Error(t, err, "check-config must refuse it")
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, out.String(), "config ok")

			err = run(t.Context(), []string{"-config", path, "-watch-interval", "0"}, io.Discard, io.Discard)
			require.Error(t, err, "and so must the daemon")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestCheckedConfigStarts: names at the edges of what -check-config
// accepts start the daemon with every transport that carries them: the
// embedded NATS server (and its gateway, named after the region), NATS
// subjects and memberlist.
func TestCheckedConfigStarts(t *testing.T) {
	region, pop := strings.Repeat("r", 64), "zürich_2-b"
	cfg := fmt.Sprintf(`
node: {id: "n:1@x", region: %s, pop: %s}
listen: {api: "127.0.0.1:0"}
nats: {embedded: {listen: "127.0.0.1:-1", gateway: {listen: %q}}}
gossip: {bind: %q}
rules:
  - {name: demo, limit: 2, window: 1m, scope: global}
`, region, pop, gossiptest.FreeAddr(t), gossiptest.FreeAddr(t))
	path := writeFile(t, cfg)
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-config", path, "-check-config"}, &out, io.Discard))
	require.Contains(t, out.String(), "config ok")

	d := startDaemon(t, path)
	defer d.stop(t)
	code, body := post(t, d.api+"/v1/check", `{"rule":"demo","key":"k"}`)
	assert.Equal(t, 200, code, body)
	var st struct {
		Replica     string `json:"replica"`
		Region      string `json:"region"`
		PoP         string `json:"pop"`
		Replication bool   `json:"replication"`
	}
	getJSON(t, d.api+"/v1/status", &st)
	assert.Equal(t, region, st.Region)
	assert.Equal(t, pop, st.PoP)
	assert.True(t, st.Replication)
	assert.True(t, strings.HasPrefix(st.Replica, region+"/"+pop+"/n:1@x#"), st.Replica)
}
