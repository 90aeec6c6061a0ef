package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/pop"
)

func TestRuleLimitsOverridesAndTiers(t *testing.T) {
	c, err := Parse([]byte(`
rules:
  - name: api
    limits: [{limit: 20, window: 1s}, {limit: 1000, window: 1h}]
    overrides:
      - {key: k-123, limits: [{limit: 10000, window: 1h}]}
    tier: header:X-Plan
    tiers:
      free: {limits: [{limit: 5, window: 1s}]}
      pro: {limits: [{limit: 50, window: 1s}, {limit: 5000, window: 1h}]}
    default_tier: free
  - name: plain
    limit: 100
    window: 1m
    overrides: [{key: big, limit: 1000}]
    tiers: {free: 10, pro: {limit: 500}}
`))
	require.NoError(t, err)
	rules, err := c.PopRules()
	require.NoError(t, err)
	api := rules[0]
	assert.Equal(t, uint64(20), api.Limit)
	assert.Equal(t, time.Second, api.Window)
	assert.Equal(t, []pop.Limit{{Limit: 1000, Window: time.Hour}}, api.More)
	assert.Equal(t, []pop.Override{{Key: "k-123", Limits: []pop.Limit{{Limit: 10000, Window: time.Hour}}}}, api.Overrides)
	assert.Equal(t, []pop.Limit{{Limit: 5, Window: time.Second}, {Limit: 1000, Window: time.Hour}}, api.LimitsFor("x", ""), "default tier")
	assert.Equal(t, []pop.Limit{{Limit: 50, Window: time.Second}, {Limit: 5000, Window: time.Hour}}, api.LimitsFor("x", "pro"))
	assert.Equal(t, []pop.Limit{{Limit: 20, Window: time.Second}, {Limit: 10000, Window: time.Hour}}, api.LimitsFor("k-123", "pro"), "override wins")
	plain := rules[1]
	assert.Equal(t, []pop.Limit{{Limit: 1000, Window: time.Minute}}, plain.LimitsFor("big", ""))
	assert.Equal(t, []pop.Limit{{Limit: 10, Window: time.Minute}}, plain.LimitsFor("x", "free"))
	assert.Equal(t, []pop.Limit{{Limit: 500, Window: time.Minute}}, plain.LimitsFor("x", "pro"))
	assert.Equal(t, []pop.Limit{{Limit: 100, Window: time.Minute}}, plain.LimitsFor("x", "gold"), "unknown tier: the default")
}

func TestRuleLimitsErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"limit and limits", `rules: [{name: r, limit: 5, window: 1s, limits: [{limit: 5, window: 1s}]}]`,
			"rules[0].limits: set together with limit/window"},
		{"window and limits", `rules: [{name: r, window: 1s, limits: [{limit: 5, window: 2s}]}]`,
			"rules[0].limits: set together with limit/window"},
		{"same window twice", `rules: [{name: r, limits: [{limit: 5, window: 1s}, {limit: 6, window: 1s}]}]`,
			"rules[0].limits[1].window: 1s already used by limits[0]"},
		{"window of limits", `rules: [{name: r, limits: [{limit: 5, window: 1s}, {limit: 6, window: 0s}]}]`,
			"rules[0].limits[1].window: must be a whole number"},
		{"override limit on several windows", `rules: [{name: r, limits: [{limit: 5, window: 1s}, {limit: 60, window: 1m}], overrides: [{key: a, limit: 9}]}]`,
			"rules[0].overrides[0].limit: the rule has several windows"},
		{"override limit and limits", `rules: [{name: r, limit: 5, window: 1s, overrides: [{key: a, limit: 9, limits: [{limit: 9, window: 1s}]}]}]`,
			"rules[0].overrides[0]: limit and limits both set"},
		{"override limit zero", `rules: [{name: r, limit: 5, window: 1s, overrides: [{key: a, limit: 0}]}]`,
			"rules[0].overrides[0].limit: required"},
		{"duplicate override", `rules: [{name: r, limit: 5, window: 1s, overrides: [{key: a, limit: 9}, {key: a, limit: 8}]}]`,
			`rules[0].overrides[1].key: "a" already overridden by overrides[0]`},
		{"override window not the rule's", `rules: [{name: r, limit: 5, window: 1s, overrides: [{key: a, limits: [{limit: 9, window: 1h}]}]}]`,
			"rules[0].overrides[0].limits[0].window: 1h0m0s is not one of the rule's windows"},
		{"unknown default tier", `rules: [{name: r, limit: 5, window: 1s, tiers: {free: 1}, default_tier: gold}]`,
			`rules[0].default_tier: unknown tier "gold"`},
		{"tier limit zero", `rules: [{name: r, limit: 5, window: 1s, tiers: {free: 0}}]`,
			"rules[0].tiers.free.limit: required"},
		{"tier limit not a number", `rules: [{name: r, limit: 5, window: 1s, tiers: {free: lots}}]`,
			"rules[0].tiers.free"},
		{"tier unknown field", `rules: [{name: r, limit: 5, window: 1s, tiers: {free: {limt: 3}}}]`,
			"limt"},
		{"tier without tiers", `rules: [{name: r, limit: 5, window: 1s, tier: header:X-Plan}]`,
			`rules[0].tier: "header:X-Plan" set without tiers`},
		{"tier not a header", `rules: [{name: r, limit: 5, window: 1s, tier: ip, tiers: {a: 1}}]`,
			`rules[0].tier: "ip" must be header:<Name>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
