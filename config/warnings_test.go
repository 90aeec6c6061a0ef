package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWarnings(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string // one substring per warning, in order
	}{
		{"long windows", `
rules: [{name: api, limit: 10, window: 1m, on_partition: share}]`, nil},
		{"node scope never replicates", `
rules: [{name: api, limit: 10, window: 1s, scope: node}]`, nil},
		{"short window, default skew and peer timeout", `
rules: [{name: api, limit: 10, window: 1s, on_partition: share}]`,
			[]string{"rules[0] (api): window 1s is less than twice limits.max_skew (2s)", "rules[0] (api): window 1s is less than twice replication.peer_timeout (2s)"}},
		{"tuned for short windows", `
limits: {max_skew: 250ms}
replication: {peer_timeout: 300ms, forget_after: 10m}
rules: [{name: api, limit: 10, window: 1s, on_partition: share}]`, nil},
		{"the shortest of several windows", `
rules: [{name: api, limits: [{limit: 100, window: 1m}, {limit: 5, window: 3s}], scope: pop}]`,
			[]string{"rules[0] (api): window 3s is less than twice limits.max_skew"}},
		{"a concurrency rule has no window", `
rules: [{name: up, kind: concurrency, limit: 5}]`, nil},
		{"a lease shorter than two flushes", `
replication: {flush_interval: 1s}
rules: [{name: up, kind: concurrency, limit: 5, lease_ttl: 1500ms}]`,
			[]string{"rules[0] (up): lease_ttl 1.5s is less than twice replication.flush_interval (1s)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			require.NoError(t, err)
			got := c.Warnings()
			require.Len(t, got, len(tt.want), strings.Join(got, "\n"))
			for i, w := range tt.want {
				assert.Contains(t, got[i], w)
			}
		})
	}
}
