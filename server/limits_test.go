package server

import (
	"net/http"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limitsRules are a rule of two windows and a rule of tiers and overrides.
const limitsRules = `
  - name: burst
    match: {path_prefix: /burst}
    limits: [{limit: 3, window: 1s}, {limit: 5, window: 1h}]
  - name: plan
    match: {path_prefix: /plan}
    key: header:X-Key
    limit: 2
    window: 1m
    overrides: [{key: vip, limit: 20}]
    tier: header:X-Plan
    tiers: {free: 1, pro: 10}
`

func TestAPISeveralWindows(t *testing.T) {
	ta := startApp(t, "rules:"+limitsRules)
	for i := range 3 {
		r := ta.Post("/v1/check", `{"rule":"burst","key":"k"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, `"burst/1s";q=3;w=1, "burst/1h";q=5;w=3600`, r.Header.Get("RateLimit-Policy"))
		m := r.JSON(t)
		assert.EqualValues(t, 2-i, m["remaining"], "the 1s window has the least left")
		assert.EqualValues(t, 1000, m["window_ms"])
		assert.EqualValues(t, 3, m["limit"])
		name, _ := servertest.ParseItem(t, r.Header.Get("RateLimit"))
		assert.Equal(t, "burst/1s", name)
	}
	r := ta.Post("/v1/check", `{"rule":"burst","key":"k"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.EqualValues(t, 1000, r.JSON(t)["window_ms"])

	// A second later the burst window is free, the hour holds 3 of 5.
	ta.Clk.Advance(2e9)
	r = ta.Post("/v1/checks", `{"checks":[{"rule":"burst","key":"k"},{"rule":"burst","key":"k"},{"rule":"burst","key":"k"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	res := r.JSON(t)["results"].([]any)
	want := []struct {
		allowed   bool
		remaining float64
	}{{true, 1}, {true, 0}, {false, 0}}
	for i, w := range want {
		m := res[i].(map[string]any)
		assert.Equal(t, w.allowed, m["allowed"], "check %d", i)
		assert.EqualValues(t, w.remaining, m["remaining"], "check %d", i)
		assert.EqualValues(t, 3_600_000, m["window_ms"], "check %d: the hour binds", i)
		assert.EqualValues(t, 5, m["limit"], "check %d", i)
	}
	// The denied check counted in neither window: the key's view of its
	// first window (1s) holds the batch's two admitted checks, the hour all
	// five admitted requests.
	assert.EqualValues(t, 2, ta.KeyTotal("burst", "k"))
	r = ta.Get("/v1/keys/burst/k")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	more := r.JSON(t)["more_windows"].([]any)
	require.Len(t, more, 1)
	hour := more[0].(map[string]any)
	assert.EqualValues(t, 3_600_000, hour["window_ms"])
	assert.EqualValues(t, 5, hour["limit"])
	assert.EqualValues(t, 5, hour["estimate"])
	var total float64
	for _, w := range hour["windows"].([]any) {
		total += w.(map[string]any)["total"].(float64)
	}
	assert.EqualValues(t, 5, total)
	r = ta.Get("/v1/keys/plan/a")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.NotContains(t, r.JSON(t), "more_windows", "a rule of one window has none")
}

func TestAPITiersAndOverrides(t *testing.T) {
	ta := startApp(t, "rules:"+limitsRules)
	admitted := func(body string, n int) (ok int, last map[string]any, h http.Header) {
		for range n {
			r := ta.Post("/v1/check", body)
			require.Contains(t, []int{200, 429}, r.Status, "%s", r.Body)
			if r.Status == 200 {
				ok++
			}
			last, h = r.JSON(t), r.Header
		}
		return ok, last, h
	}
	ok, m, h := admitted(`{"rule":"plan","key":"a","tier":"pro"}`, 12)
	assert.Equal(t, 10, ok)
	assert.EqualValues(t, 10, m["limit"])
	assert.Equal(t, `"plan";q=10;w=60`, h.Get("RateLimit-Policy"))
	assert.Equal(t, "10", h.Get("X-RateLimit-Limit"))
	ok, _, _ = admitted(`{"rule":"plan","key":"b","tier":"free"}`, 3)
	assert.Equal(t, 1, ok)
	ok, _, h = admitted(`{"rule":"plan","key":"c","tier":"no-such-tier"}`, 3)
	assert.Equal(t, 2, ok, "an unknown tier is the default")
	assert.Equal(t, `"plan";q=2;w=60`, h.Get("RateLimit-Policy"))
	ok, _, _ = admitted(`{"rule":"plan","key":"vip","tier":"free"}`, 22)
	assert.Equal(t, 20, ok, "the override wins over the tier")
	// In a batch, each check with its tier.
	r := ta.Post("/v1/checks", `{"atomic":true,"checks":[{"rule":"plan","key":"d","tier":"pro","cost":6},{"rule":"plan","key":"d","tier":"pro","cost":4}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, true, r.JSON(t)["allowed"])
	// A cost no tier allows is refused; one the tier does not allow is denied.
	assert.Equal(t, http.StatusBadRequest, ta.Post("/v1/check", `{"rule":"plan","key":"e","cost":21}`).Status)
	assert.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"plan","key":"e","cost":5}`).Status)
	assert.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"plan","key":"e","cost":5,"tier":"pro"}`).Status)
	r = ta.Post("/v1/check", `{"rule":"plan","key":"e","tier":7}`)
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
}

func TestProxyTiersAndWindows(t *testing.T) {
	up := servertest.NewUpstream(t)
	// The tests' client is the trusted proxy that sets X-Plan.
	ta := startApp(t, servertest.ProxyYAML(up.URL, "127.0.0.1/32", limitsRules))
	ok := 0
	for range 12 {
		r := ta.Proxy("GET", "/plan/x", "X-Key", "a", "X-Plan", "pro")
		if r.Status == http.StatusOK {
			ok++
			assert.Equal(t, `"plan";q=10;w=60`, r.Header.Get("RateLimit-Policy"))
		}
	}
	assert.Equal(t, 10, ok)
	ok = 0
	for range 3 {
		// Two tier headers: neither is believed, the default applies.
		if ta.Proxy("GET", "/plan/x", "X-Key", "b", "X-Plan", "pro", "X-Plan", "pro").Status == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 2, ok)
	for range 3 {
		require.Equal(t, http.StatusOK, ta.Proxy("GET", "/burst").Status)
	}
	r := ta.Proxy("GET", "/burst")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	m := r.JSON(t)
	assert.EqualValues(t, 1000, m["window_ms"])
	assert.EqualValues(t, 3, m["limit"])
	name, _ := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, "burst/1s", name)
	assert.Equal(t, 3, up.Count()-10-2)
}

// TestTierOnlyThroughATrustedProxy: a client that reaches the proxy or
// forward-auth listener itself cannot name its tier; the rule's default
// applies.
func TestTierOnlyThroughATrustedProxy(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", limitsRules))
	ok := 0
	for range 20 {
		if ta.Proxy("GET", "/plan/x", "X-Key", "a", "X-Plan", "pro").Status == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 2, ok, "the default tier's limit, not pro's 10")

	fa := startApp(t, servertest.ForwardAuthYAML("192.0.2.1", limitsRules, ""))
	ok = 0
	for range 20 {
		if fa.ForwardAuth("GET", "/plan/x", "X-Key", "a", "X-Plan", "pro").Status == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 2, ok, "an untrusted forward-auth peer is judged as the origin: no tier")
}

func TestForwardAuthTier(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", limitsRules, ""))
	ok := 0
	for range 4 {
		if ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/plan/x", "198.51.100.9", "X-Key", "a", "X-Plan", "free")...).Status == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 1, ok)
}

func TestRLSTier(t *testing.T) {
	ta := startApp(t, `
listen: {api: "127.0.0.1:0", grpc: "127.0.0.1:0"}
rules:`+limitsRules+`
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [user_id, plan], tier: plan, rule: plan}
        - {entries: [user_id], rule: plan}
`)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	ok := 0
	for range 12 {
		res := servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("user_id", "u1", "plan", "pro")))
		if res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	assert.Equal(t, 10, ok)
	// Without the tier entry: the same key (the tier is no part of it),
	// the default limit, already spent.
	res := servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("user_id", "u1")))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	assert.EqualValues(t, 10, ta.KeyTotal("plan", "u1"))
}

func TestReloadOverride(t *testing.T) {
	ta := startApp(t, "rules: [{name: r, limit: 2, window: 1m}]\n")
	for range 2 {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"vip"}`).Status)
	}
	require.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"r","key":"vip"}`).Status)
	ta.WriteConfig("rules: [{name: r, limit: 2, window: 1m, overrides: [{key: vip, limit: 5}]}]\n")
	require.NoError(t, ta.App.Reload())
	for range 3 {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"vip"}`).Status, "the counts stay, the override applies")
	}
	require.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"r","key":"vip"}`).Status)

	ta.WriteConfig("rules: [{name: r, limit: 2, window: 1m, overrides: [{key: vip, limit: 5}, {key: vip, limit: 6}]}]\n")
	err := ta.App.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `rules[0].overrides[1].key: "vip" already overridden by overrides[0]`)
}

func TestStatusListsWindowsAndTiers(t *testing.T) {
	ta := startApp(t, "rules:"+limitsRules)
	rules := ta.Get("/v1/status").JSON(t)["rules"].([]any)
	require.Len(t, rules, 2)
	burst, plan := rules[0].(map[string]any), rules[1].(map[string]any)
	assert.Equal(t, []any{map[string]any{"limit": 3.0, "window": "1s"}, map[string]any{"limit": 5.0, "window": "1h0m0s"}}, burst["limits"])
	assert.EqualValues(t, 1, plan["overrides"])
	assert.Equal(t, []any{"free", "pro"}, plan["tiers"])
}

// TestRateLimitT: t in the RateLimit field is the time until more quota is
// available (draft -11), not until the whole limit is back.
func TestRateLimitT(t *testing.T) {
	ta := startApp(t, "rules: [{name: r, limit: 10, window: 10s}]\n")
	for range 10 {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
	}
	// 11 s on: the full previous window weighs 0.9 (9), one request fits
	// and leaves 0; one more unit frees when 10*(1-f)+1 <= 9, at f = 0.2,
	// one second later. The whole limit is back after the next window: 19 s.
	ta.Clk.Advance(11e9)
	r := ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status)
	_, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, map[string]int64{"r": 0, "t": 1}, p)
	assert.Equal(t, "19", r.Header.Get("X-RateLimit-Reset"))
	// Denied: t is the retry-after, as Retry-After.
	r = ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	_, p = servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, r.Header.Get("Retry-After"), strconv.FormatInt(p["t"], 10))
	// A fresh key:
	r = ta.Post("/v1/check", `{"rule":"r","key":"fresh","cost":1}`)
	_, p = servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.EqualValues(t, 9, p["r"])
	assert.Positive(t, p["t"], "one unit spent in the current window frees only in the next")
}
