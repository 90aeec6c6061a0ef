package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/pop"
)

func TestParseGCRA(t *testing.T) {
	c, err := Parse([]byte("rules: [{name: pace, limit: 100, window: 1m, algorithm: gcra, burst: 10, scope: node}]"))
	require.NoError(t, err)
	rs, err := c.PopRules()
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, pop.GCRA, rs[0].Algorithm)
	assert.Equal(t, uint64(10), rs[0].Burst)
	assert.Equal(t, int64(600*time.Millisecond), rs[0].GCRARate().Interval)

	c, err = Parse([]byte("rules: [{name: pace, limit: 100, window: 1m, algorithm: gcra, scope: node}]"))
	require.NoError(t, err)
	rs, err = c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, uint64(100), rs[0].BurstOf(), "burst defaults to the limit")

	for _, scope := range []string{"pop", "global"} {
		c, err = Parse([]byte("rules: [{name: pace, limit: 100, window: 1m, algorithm: gcra, burst: 10, scope: " + scope + "}]"))
		require.NoError(t, err, scope)
		rs, err = c.PopRules()
		require.NoError(t, err, scope)
		assert.Equal(t, pop.GCRA, rs[0].Algorithm, scope)
	}

	c, err = Parse([]byte("rules: [{name: win, limit: 100, window: 1m, algorithm: sliding_window}]"))
	require.NoError(t, err)
	rs, err = c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, pop.SlidingWindow, rs[0].Algorithm)
}

func TestParseGCRAErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"unknown algorithm", "{name: r, limit: 5, window: 1s, algorithm: leaky}", `rules[0].algorithm: unknown algorithm "leaky" (want sliding_window or gcra)`},
		{"burst of a window rule", "{name: r, limit: 5, window: 1s, burst: 2}", "rules[0].burst: only an algorithm: gcra rule has a burst"},
		{"burst over limit", "{name: r, limit: 5, window: 1s, algorithm: gcra, scope: node, burst: 6}", "rules[0].burst: 6 exceeds limit 5"},
		{"several windows", "{name: r, limits: [{limit: 5, window: 1s}, {limit: 50, window: 1m}], algorithm: gcra, scope: node}", "rules[0].limits: an algorithm: gcra rule has one rate"},
		{"tiers", "{name: r, limit: 5, window: 1s, algorithm: gcra, scope: node, tiers: {gold: {limit: 10}}}", "rules[0].tiers: not supported"},
		{"share", "{name: r, limit: 5, window: 1s, algorithm: gcra, on_partition: share}", "rules[0].on_partition: an algorithm: gcra rule keeps pacing on what each side sees during a partition (keep); share is not supported"},
		{"too fast", "{name: r, limit: 5000, window: 1ms, algorithm: gcra, scope: node}", "rules[0].limit: a gcra rule paces one unit every window/limit, which must be at least 1µs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("rules: [" + tc.in + "]"))
			if err == nil {
				_, err = c.PopRules()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
