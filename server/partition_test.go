package server

import (
	"testing"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPartitionStatusAndMetrics: while a PoP is unheard, a share rule limits
// this side to its share and the status page and metrics say so.
func TestPartitionStatusAndMetrics(t *testing.T) {
	ta := startApp(t, `
rules:
  - {name: shared, limit: 10, window: 1m, on_partition: share}
  - {name: kept, limit: 10, window: 1m}
`)
	mfs := ta.Scrape()
	v, ok := servertest.MetricValue(mfs, "geolimit_partition_active")
	require.True(t, ok)
	assert.Zero(t, v)
	st := ta.Get("/v1/status").JSON(t)
	part := st["partition"].(map[string]any)
	assert.Equal(t, false, part["partitioned"])

	ta.App.node.Link().SetUnheard(ta.Clk.Now(), []string{"us/iad"})
	allowed := map[string]int{}
	for i := 0; i < 10; i++ {
		for _, rule := range []string{"shared", "kept"} {
			if ta.Post("/v1/check", `{"rule":"`+rule+`","key":"k"}`).Status == 200 {
				allowed[rule]++
			}
		}
	}
	assert.Equal(t, 5, allowed["shared"], "a key without history gets the PoP-count split: 1 of 2 PoPs")
	assert.Equal(t, 10, allowed["kept"])

	st = ta.Get("/v1/status").JSON(t)
	part = st["partition"].(map[string]any)
	assert.Equal(t, true, part["partitioned"])
	assert.Equal(t, []any{"us/iad"}, part["unheard"])
	rules := map[string]bool{}
	for _, r := range part["rules"].([]any) {
		m := r.(map[string]any)
		rules[m["rule"].(string)] = m["enforcing_share"].(bool)
	}
	assert.Equal(t, map[string]bool{"shared": true, "kept": false}, rules)

	mfs = ta.Scrape()
	v, _ = servertest.MetricValue(mfs, "geolimit_partition_active")
	assert.Equal(t, 1.0, v)
	v, _ = servertest.MetricValue(mfs, "geolimit_rule_enforcing_share", "rule", "shared")
	assert.Equal(t, 1.0, v)
	v, _ = servertest.MetricValue(mfs, "geolimit_rule_enforcing_share", "rule", "kept")
	assert.Zero(t, v)
	v, _ = servertest.MetricValue(mfs, "geolimit_rule_mean_share", "rule", "shared")
	assert.Equal(t, 0.5, v)
}
