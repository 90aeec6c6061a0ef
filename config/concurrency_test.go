package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/pop"
)

func TestConcurrencyRuleConfig(t *testing.T) {
	c, err := Parse([]byte(`
rules:
  - name: uploads
    kind: concurrency
    limit: 5
    key: header:X-Api-Key
  - name: slow
    kind: concurrency
    limit: 2
    scope: node
    lease_ttl: 10s
  - name: api
    limit: 100
    window: 1m
`))
	require.NoError(t, err)
	rules, err := c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, pop.Rule{Name: "uploads", Kind: pop.Concurrency, Limit: 5, Cost: 1, Scope: pop.ScopePoP, LeaseTTL: time.Minute}, rules[0],
		"scope pop and lease_ttl 1m by default")
	assert.Equal(t, pop.ScopeNode, rules[1].Scope)
	assert.Equal(t, 10*time.Second, rules[1].LeaseTTL)
	assert.Equal(t, pop.Rate, rules[2].Kind)
	assert.Zero(t, rules[2].LeaseTTL)
}

func TestConcurrencyRuleConfigErrors(t *testing.T) {
	conc := func(extra string) string {
		return "rules:\n  - name: c\n    kind: concurrency\n    limit: 10\n" + extra
	}
	for _, tc := range []struct{ name, in, want string }{
		{"unknown kind", "rules: [{name: r, kind: burst, limit: 1, window: 1s}]", `rules[0].kind: unknown kind "burst" (want rate or concurrency)`},
		{"lease_ttl on a rate rule", "rules: [{name: r, limit: 1, window: 1s, lease_ttl: 1m}]", "rules[0].lease_ttl: only for kind: concurrency"},
		{"window", conc("    window: 1m\n"), "rules[0].window: kind: concurrency has no window"},
		{"limits", conc("    limits: [{limit: 1, window: 1s}]\n"), "rules[0].limits: kind: concurrency has one limit"},
		{"gcra", conc("    algorithm: gcra\n"), "rules[0].algorithm: kind: concurrency counts requests in flight"},
		{"burst", conc("    burst: 3\n"), "rules[0].algorithm: kind: concurrency counts requests in flight"},
		{"overrides", conc("    overrides: [{key: k, limit: 1}]\n"), "rules[0].overrides: not supported for kind: concurrency"},
		{"tiers", conc("    tiers: {pro: 5}\n"), "rules[0].tiers: not supported for kind: concurrency"},
		{"block_for", conc("    block_for: 1m\n"), "rules[0].block_for: not supported for kind: concurrency"},
		{"share", conc("    on_partition: share\n"), "rules[0].on_partition: share needs a rate rule's window"},
		{"on_unsure deny", conc("    on_unsure: deny\n"), "rules[0].on_unsure: deny is not supported for kind: concurrency"},
		{"global", conc("    scope: global\n"), "rules[0].scope: global is not supported for kind: concurrency"},
		{"short lease", conc("    lease_ttl: 10ms\n"), "rules[0].lease_ttl: must be a whole number of milliseconds from 1s to 24h0m0s, got 10ms"},
		{"no limit", "rules: [{name: c, kind: concurrency}]", "rules[0].limit: must be at least 1"},
		{"huge limit", conc("    limit: 2000000\n")[:0] + "rules: [{name: c, kind: concurrency, limit: 2000000}]", "rules[0].limit: at most 1000000 requests in flight"},
		{"rls", conc("listen: {grpc: 127.0.0.1:8081}\nrls: {domains: [{domain: d, descriptors: [{entries: [remote_address], rule: c}]}]}\n"),
			`rls.domains[0].descriptors[0].rule: "c" is kind: concurrency`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
