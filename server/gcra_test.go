package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGCRAAPI: a gcra rule over /v1/check and /v1/checks: the burst at
// once, then one request per interval, with remaining, reset and
// retry-after exact from the key's TAT.
func TestGCRAAPI(t *testing.T) {
	// One request every 100ms, 3 at once.
	ta := startApp(t, "rules:\n  - {name: pace, limit: 10, window: 1s, algorithm: gcra, burst: 3, scope: node}\n")
	for i := range 3 {
		r := ta.Post("/v1/check", `{"rule":"pace","key":"k"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		m := r.JSON(t)
		assert.Equal(t, true, m["allowed"])
		assert.EqualValues(t, 10, m["limit"])
		assert.EqualValues(t, 2-i, m["remaining"])
		assert.EqualValues(t, 100*(i+1), m["reset_ms"])
		assert.EqualValues(t, 0, m["retry_after_ms"])
	}
	ta.Clk.Advance(30 * time.Millisecond)
	r := ta.Post("/v1/check", `{"rule":"pace","key":"k"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	m := r.JSON(t)
	assert.EqualValues(t, 70, m["retry_after_ms"], "the TAT is 300ms ahead: the next request fits at 100ms")
	assert.EqualValues(t, 270, m["reset_ms"])
	assert.EqualValues(t, 0, m["remaining"])
	assert.Equal(t, int64(1), servertest.HeaderInt(t, r.Header, "Retry-After"))
	_, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.EqualValues(t, 0, p["r"])

	ta.Clk.Advance(70 * time.Millisecond)
	r = ta.Post("/v1/check", `{"rule":"pace","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.EqualValues(t, 0, r.JSON(t)["remaining"])

	// A batch: each item on its own, against the same TATs.
	r = ta.Post("/v1/checks", `{"checks":[{"rule":"pace","key":"k"},{"rule":"pace","key":"other","cost":2},{"rule":"pace","key":"other","cost":2}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	res := r.JSON(t)["results"].([]any)
	require.Len(t, res, 3)
	first, second, third := res[0].(map[string]any), res[1].(map[string]any), res[2].(map[string]any)
	assert.Equal(t, false, first["allowed"])
	assert.EqualValues(t, 100, first["retry_after_ms"])
	assert.Equal(t, true, second["allowed"])
	assert.EqualValues(t, 1, second["remaining"])
	assert.Equal(t, false, third["allowed"])
	assert.EqualValues(t, 100, third["retry_after_ms"])

	// A cost over the burst can never be admitted: a client error.
	r = ta.Post("/v1/check", `{"rule":"pace","key":"k","cost":4}`)
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)

	// The key view: what the key has spent and not earned back.
	r = ta.Get("/v1/keys/pace/other")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.InDelta(t, 2.0, r.JSON(t)["estimate"], 1e-9)

	r = ta.Get("/v1/status")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	rules := r.JSON(t)["rules"].([]any)
	require.Len(t, rules, 1)
	assert.Equal(t, "gcra", rules[0].(map[string]any)["algorithm"])
	assert.EqualValues(t, 3, rules[0].(map[string]any)["burst"])
}

// TestGCRAProxy: proxy mode in front of a real upstream with a gcra rule:
// denied requests never reach it, and Retry-After says when the next one
// fits.
func TestGCRAProxy(t *testing.T) {
	up := servertest.NewUpstream(t)
	// One request every 30s, 2 at once.
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: pace, limit: 2, window: 1m, algorithm: gcra, scope: node, match: {path_prefix: /api}}
`))
	for i := range 2 {
		r := ta.Proxy("GET", "/api/x")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, "hello from upstream GET /api/x", string(r.Body))
		assert.EqualValues(t, 1-i, servertest.HeaderInt(t, r.Header, "X-RateLimit-Remaining"))
		assert.Equal(t, `"pace";q=2;w=60`, r.Header.Get("RateLimit-Policy"))
	}
	ta.Clk.Advance(10 * time.Second)
	r := ta.Proxy("GET", "/api/x")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, 2, up.Count(), "the denied request never reached the upstream")
	assert.Equal(t, int64(20), servertest.HeaderInt(t, r.Header, "Retry-After"))
	_, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, map[string]int64{"r": 0, "t": 20}, p)

	ta.Clk.Advance(19 * time.Second)
	r = ta.Proxy("GET", "/api/x")
	assert.Equal(t, http.StatusTooManyRequests, r.Status, "one second early")
	ta.Clk.Advance(time.Second)
	r = ta.Proxy("GET", "/api/x")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, 3, up.Count())
	assert.EqualValues(t, 2, ta.Decisions("pace", "denied"))
}
