package server

import (
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/geolimit/geolimit/server/internal/servertest"
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
		r := ta.Post("/v1/check", check)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.NotContains(t, r.JSON(t), "blocked")
	}
	r := ta.Post("/v1/check", check)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	body := r.JSON(t)
	assert.Equal(t, true, body["blocked"])
	assert.EqualValues(t, 600_000, body["retry_after_ms"])
	assert.EqualValues(t, 600, servertest.HeaderInt(t, r.Header, "Retry-After"))

	// Two minutes on the window has passed, the block has not.
	ta.Clk.Advance(2 * time.Minute)
	r = ta.Post("/v1/check", check)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	body = r.JSON(t)
	assert.Equal(t, true, body["blocked"])
	assert.EqualValues(t, 480_000, body["retry_after_ms"])
	assert.EqualValues(t, 480, servertest.HeaderInt(t, r.Header, "Retry-After"))

	// The batch API answers the same.
	r = ta.Post("/v1/checks", `{"checks":[{"rule":"login","key":"alice"},{"rule":"api","key":"alice"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	res := r.JSON(t)["results"].([]any)[0].(map[string]any)
	assert.Equal(t, false, res["allowed"])
	assert.Equal(t, true, res["blocked"])

	until := t0 + int64(10*time.Minute)
	v := ta.Get("/v1/keys/login/alice").JSON(t)
	assert.EqualValues(t, until/int64(time.Millisecond), v["blocked_until_ms"])
	assert.Equal(t, time.Unix(0, until).UTC().Format(time.RFC3339Nano), v["blocked_until"])
	assert.NotContains(t, ta.Get("/v1/keys/login/bob").JSON(t), "blocked_until")

	// Envoy's rate limit service: the wait is the block's.
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	rr := servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("user", "alice")))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rr.GetOverallCode())
	assert.Equal(t, 8*time.Minute, rr.GetStatuses()[0].GetDurationUntilReset().AsDuration())
	assert.Equal(t, "480", servertest.HeaderMap(rr.GetResponseHeadersToAdd())["retry-after"])

	mfs := ta.Scrape()
	n, ok := servertest.MetricValue(mfs, "geolimit_blocks_total", "rule", "login")
	require.True(t, ok)
	assert.Equal(t, 1.0, n)
	n, _ = servertest.MetricValue(mfs, "geolimit_blocked_denials_total", "rule", "login")
	assert.Equal(t, 3.0, n, "the API, the batch and the rate limit service")
	n, _ = servertest.MetricValue(mfs, "geolimit_blocks_held")
	assert.Equal(t, 1.0, n)

	ta.Clk.Set(until)
	r = ta.Post("/v1/check", check)
	assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func TestPenaltyBoxProxy(t *testing.T) {
	up := servertest.NewUpstream(t)
	// Two enforce rules: the proxy checks both before counting either, and a
	// denial found by that check starts the block all the same.
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: per-ip, limit: 2, window: 1m, block_for: 5m, match: {path_prefix: /login}}
  - {name: site, limit: 100, window: 1m}
`))
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ta.Proxy("POST", "/login").Status)
	}
	r := ta.Proxy("POST", "/login")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, true, r.JSON(t)["blocked"])
	assert.EqualValues(t, 300, servertest.HeaderInt(t, r.Header, "Retry-After"))

	ta.Clk.Advance(2 * time.Minute)
	r = ta.Proxy("POST", "/login")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.EqualValues(t, 180, servertest.HeaderInt(t, r.Header, "Retry-After"))
	assert.EqualValues(t, 180, servertest.HeaderInt(t, r.Header, "X-RateLimit-Reset"))
	assert.Equal(t, 2, up.Count(), "blocked requests never reach the upstream")
	require.Equal(t, http.StatusOK, ta.Proxy("GET", "/home").Status, "other paths pass")
}

func TestOnUnsureOverHTTP(t *testing.T) {
	ta := startApp(t, boxYAML)
	ta.App.node.Link().SetSynced(false)
	r := ta.Post("/v1/check", `{"rule":"otp","key":"alice"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	body := r.JSON(t)
	assert.Equal(t, "not_synced", body["unsure"])
	assert.EqualValues(t, 1000, body["retry_after_ms"])
	assert.EqualValues(t, 1, servertest.HeaderInt(t, r.Header, "Retry-After"))
	r = ta.Post("/v1/check", `{"rule":"api","key":"alice"}`)
	assert.Equal(t, http.StatusOK, r.Status, "on_unsure: allow")
	assert.NotContains(t, r.JSON(t), "unsure")
	n, ok := servertest.MetricValue(ta.Scrape(), "geolimit_unsure_denials_total", "rule", "otp", "reason", "not_synced")
	require.True(t, ok)
	assert.Equal(t, 1.0, n)
	assert.EqualValues(t, 0, ta.KeyTotal("otp", "alice"), "nothing counted")

	ta.App.node.Link().SetSynced(true)
	assert.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"otp","key":"alice"}`).Status)
}

func TestPenaltyBoxForwardAuthAndAtomicBatch(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", `
  - {name: login, limit: 2, window: 1m, block_for: 5m, match: {path_prefix: /login}}
  - {name: site, limit: 100, window: 1m}
`, ""))
	hdr := servertest.FwdHeaders("POST", "/login", "198.51.100.9")
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ta.ForwardAuth("GET", "/", hdr...).Status)
	}
	r := ta.ForwardAuth("GET", "/", hdr...)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, true, r.JSON(t)["blocked"])
	assert.EqualValues(t, 300, servertest.HeaderInt(t, r.Header, "Retry-After"))

	// An atomic batch checks every rule before counting any: the denial it
	// finds starts the block too.
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"login","key":"u"}`).Status)
	}
	r = ta.Post("/v1/checks", `{"atomic":true,"checks":[{"rule":"site","key":"u"},{"rule":"login","key":"u"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	body := r.JSON(t)
	assert.Equal(t, false, body["allowed"])
	assert.EqualValues(t, 0, body["counted"])
	last := body["results"].([]any)[1].(map[string]any)
	assert.Equal(t, true, last["blocked"])
	ta.Clk.Advance(2 * time.Minute)
	r = ta.Post("/v1/check", `{"rule":"login","key":"u"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "blocked although the window has passed")
	assert.EqualValues(t, 180, servertest.HeaderInt(t, r.Header, "Retry-After"))
}
