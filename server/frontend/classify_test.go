package frontend_test

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

// TestComposeKeyInjective: two different lists of parts never give one
// key, over random parts rich in the separator and the escape.
func TestComposeKeyInjective(t *testing.T) {
	seed := uint64(20261126)
	rng := rand.New(rand.NewPCG(seed, 0))
	alphabet := []string{"|", `\`, "a", "b", `\|`, `|\`}
	seen := map[string][]string{}
	for range 50_000 {
		parts := make([]string, 2+rng.IntN(2))
		for i := range parts {
			var b strings.Builder
			for range 1 + rng.IntN(4) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			parts[i] = b.String()
		}
		k := frontend.ComposeKey(parts)
		if prev, ok := seen[k]; ok {
			require.Equal(t, prev, parts, "seed %d: key %q", seed, k)
		}
		seen[k] = parts
	}
	assert.Equal(t, "acme|bob", frontend.ComposeKey([]string{"acme", "bob"}), "parts without | or \\ are kept as they are")
	assert.Equal(t, `acme\|bob|x`, frontend.ComposeKey([]string{"acme|bob", "x"}))
	assert.Equal(t, `a\\|b`, frontend.ComposeKey([]string{`a\`, "b"}))
}

const classifyYAML = `
proxy: {trusted_proxies: [10.0.0.0/8]}
rules:
  - {name: pair, key: [ip, "header:X-User"], limit: 5, window: 1m, match: {path_prefix: /api}}
  - name: plan
    key: header:X-User
    tier: header:X-Plan
    limit: 2
    window: 1m
    tiers: {pro: 10}
  - {name: posts, limit: 5, window: 1m, match: {methods: [POST]}}
`

func origin(peer string, trusted bool, method, path string, hdr ...string) frontend.Origin {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	return frontend.Origin{Method: method, Path: path, Host: "example.com", Header: h, IP: netip.MustParseAddr(peer), Trusted: trusted}
}

func TestClassify(t *testing.T) {
	env, _ := frontendtest.Env(t, classifyYAML)
	rs := env.Rules.Load()
	tests := []struct {
		name  string
		o     frontend.Origin
		rules []string
		keys  []string
		tiers []string
	}{
		{"a GET under /api with a user", origin("203.0.113.7", false, "GET", "/api/x", "X-User", "bob|x", "X-Plan", "pro"),
			[]string{"pair", "plan"}, []string{`203.0.113.7|bob\|x`, "bob|x"}, []string{"", ""}},
		{"the tier through a trusted proxy", origin("203.0.113.7", true, "GET", "/x", "X-User", "bob", "X-Plan", "pro"),
			[]string{"plan"}, []string{"bob"}, []string{"pro"}},
		{"no user: only the method rule", origin("203.0.113.7", false, "post", "/api", "X-Plan", "pro"),
			[]string{"posts"}, []string{"203.0.113.7"}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := frontend.GetChecks(pop.All, false)
			defer c.Put()
			rs.Classify(&tt.o, c)
			var rules, keys, tiers []string
			for i, ck := range c.Req.Checks {
				rules = append(rules, c.Rules[i].Pop.Name)
				keys = append(keys, ck.Key)
				tiers = append(tiers, ck.Tier)
			}
			assert.Equal(t, tt.rules, rules)
			assert.Equal(t, tt.keys, keys)
			assert.Equal(t, tt.tiers, tiers)
		})
	}
}

func TestDecideOriginAmbiguousCountsNothing(t *testing.T) {
	env, _ := frontendtest.Env(t, classifyYAML)
	o := origin("203.0.113.7", false, "GET", "/x", "X-User", "a", "X-User", "b")
	c := env.DecideOrigin(env.Rules.Load(), &o, 429, nil)
	defer c.Put()
	assert.Equal(t, "X-User", o.Ambiguous)
	assert.Empty(t, c.Checks.Res, "nothing decided")
	v, err := env.Node.View(frontendtest.T0, "plan", "a")
	require.NoError(t, err)
	assert.Zero(t, v.Estimate)
}
