package server

import (
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const boxYAML = `
listen: {api: "127.0.0.1:0", grpc: "127.0.0.1:0"}
rules:
  - {name: login, limit: 2, window: 1m, block_for: 10m}
  - {name: otp, limit: 5, window: 1m, on_unsure: deny}
  - {name: api, limit: 5, window: 1m}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [user], rule: login}
`

func TestPenaltyBoxOverHTTP(t *testing.T) {
	ta := startApp(t, boxYAML)
	check := `{"rule":"login","key":"alice"}`
	for i := 0; i < 2; i++ {
		r := ta.post("/v1/check", check)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		assert.NotContains(t, r.json(t), "blocked")
	}
	r := ta.post("/v1/check", check)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	body := r.json(t)
	assert.Equal(t, true, body["blocked"])
	assert.EqualValues(t, 600_000, body["retry_after_ms"])
	assert.EqualValues(t, 600, headerInt(t, r.header, "Retry-After"))

	// Two minutes on the window has passed, the block has not.
	ta.clk.Advance(2 * time.Minute)
	r = ta.post("/v1/check", check)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	body = r.json(t)
	assert.Equal(t, true, body["blocked"])
	assert.EqualValues(t, 480_000, body["retry_after_ms"])
	assert.EqualValues(t, 480, headerInt(t, r.header, "Retry-After"))

	// The batch API answers the same.
	r = ta.post("/v1/checks", `{"checks":[{"rule":"login","key":"alice"},{"rule":"api","key":"alice"}]}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	res := r.json(t)["results"].([]any)[0].(map[string]any)
	assert.Equal(t, false, res["allowed"])
	assert.Equal(t, true, res["blocked"])

	until := t0 + int64(10*time.Minute)
	v := ta.get("/v1/keys/login/alice").json(t)
	assert.EqualValues(t, until/int64(time.Millisecond), v["blocked_until_ms"])
	assert.Equal(t, time.Unix(0, until).UTC().Format(time.RFC3339Nano), v["blocked_until"])
	assert.NotContains(t, ta.get("/v1/keys/login/bob").json(t), "blocked_until")

	// Envoy's rate limit service: the wait is the block's.
	c, _ := rlsClient(t, ta)
	rr := shouldRL(t, c, rlsReq("edge", desc("user", "alice")))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rr.GetOverallCode())
	assert.Equal(t, 8*time.Minute, rr.GetStatuses()[0].GetDurationUntilReset().AsDuration())
	assert.Equal(t, "480", headerMap(rr.GetResponseHeadersToAdd())["retry-after"])

	mfs := ta.scrape()
	n, ok := metricValue(mfs, "geolimit_blocks_total", "rule", "login")
	require.True(t, ok)
	assert.Equal(t, 1.0, n)
	n, _ = metricValue(mfs, "geolimit_blocked_denials_total", "rule", "login")
	assert.Equal(t, 3.0, n, "the API, the batch and the rate limit service")
	n, _ = metricValue(mfs, "geolimit_blocks_held")
	assert.Equal(t, 1.0, n)

	ta.clk.Set(until)
	r = ta.post("/v1/check", check)
	assert.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

func TestPenaltyBoxProxy(t *testing.T) {
	up := newUpstream(t)
	// Two enforce rules: the proxy checks both before counting either, and a
	// denial found by that check starts the block all the same.
	ta := startApp(t, proxyYAML(up.URL, "", `
  - {name: per-ip, limit: 2, window: 1m, block_for: 5m, match: {path_prefix: /login}}
  - {name: site, limit: 100, window: 1m}
`))
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ta.proxy("POST", "/login").status)
	}
	r := ta.proxy("POST", "/login")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, true, r.json(t)["blocked"])
	assert.EqualValues(t, 300, headerInt(t, r.header, "Retry-After"))

	ta.clk.Advance(2 * time.Minute)
	r = ta.proxy("POST", "/login")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.EqualValues(t, 180, headerInt(t, r.header, "Retry-After"))
	assert.EqualValues(t, 180, headerInt(t, r.header, "X-RateLimit-Reset"))
	assert.Equal(t, 2, up.count(), "blocked requests never reach the upstream")
	require.Equal(t, http.StatusOK, ta.proxy("GET", "/home").status, "other paths pass")
}

func TestOnUnsureOverHTTP(t *testing.T) {
	ta := startApp(t, boxYAML)
	ta.node.Link().SetSynced(false)
	r := ta.post("/v1/check", `{"rule":"otp","key":"alice"}`)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	body := r.json(t)
	assert.Equal(t, "not_synced", body["unsure"])
	assert.EqualValues(t, 1000, body["retry_after_ms"])
	assert.EqualValues(t, 1, headerInt(t, r.header, "Retry-After"))
	r = ta.post("/v1/check", `{"rule":"api","key":"alice"}`)
	assert.Equal(t, http.StatusOK, r.status, "on_unsure: allow")
	assert.NotContains(t, r.json(t), "unsure")
	n, ok := metricValue(ta.scrape(), "geolimit_unsure_denials_total", "rule", "otp", "reason", "not_synced")
	require.True(t, ok)
	assert.Equal(t, 1.0, n)
	assert.EqualValues(t, 0, ta.keyTotal("otp", "alice"), "nothing counted")

	ta.node.Link().SetSynced(true)
	assert.Equal(t, http.StatusOK, ta.post("/v1/check", `{"rule":"otp","key":"alice"}`).status)
}

func TestPenaltyBoxForwardAuthAndAtomicBatch(t *testing.T) {
	ta := startApp(t, forwardAuthYAML("127.0.0.1", `
  - {name: login, limit: 2, window: 1m, block_for: 5m, match: {path_prefix: /login}}
  - {name: site, limit: 100, window: 1m}
`, ""))
	hdr := fwdHeaders("POST", "/login", "198.51.100.9")
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ta.fa("GET", "/", hdr...).status)
	}
	r := ta.fa("GET", "/", hdr...)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, true, r.json(t)["blocked"])
	assert.EqualValues(t, 300, headerInt(t, r.header, "Retry-After"))

	// An atomic batch checks every rule before counting any: the denial it
	// finds starts the block too.
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ta.post("/v1/check", `{"rule":"login","key":"u"}`).status)
	}
	r = ta.post("/v1/checks", `{"atomic":true,"checks":[{"rule":"site","key":"u"},{"rule":"login","key":"u"}]}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	body := r.json(t)
	assert.Equal(t, false, body["allowed"])
	assert.EqualValues(t, 0, body["counted"])
	last := body["results"].([]any)[1].(map[string]any)
	assert.Equal(t, true, last["blocked"])
	ta.clk.Advance(2 * time.Minute)
	r = ta.post("/v1/check", `{"rule":"login","key":"u"}`)
	require.Equal(t, http.StatusTooManyRequests, r.status, "blocked although the window has passed")
	assert.EqualValues(t, 180, headerInt(t, r.header, "Retry-After"))
}
