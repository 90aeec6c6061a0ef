package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestIdempotencyAPI: a retried /v1/check or /v1/checks item with the same
// idempotency key counts once and says "repeat":true.
func TestIdempotencyAPI(t *testing.T) {
	ta := startApp(t, "rules:\n  - {name: pay, limit: 2, window: 1m}\n")
	for i := range 3 {
		r := ta.Post("/v1/check", `{"rule":"pay","key":"acct-1","idempotency_key":"charge-42"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		m := r.JSON(t)
		assert.Equal(t, true, m["allowed"])
		assert.EqualValues(t, 1, m["remaining"])
		if i == 0 {
			assert.NotContains(t, m, "repeat")
		} else {
			assert.Equal(t, true, m["repeat"], "retry %d", i)
		}
	}
	assert.Equal(t, uint64(1), ta.KeyTotal("pay", "acct-1"), "counted once")

	r := ta.Post("/v1/checks", `{"checks":[{"rule":"pay","key":"acct-1","idempotency_key":"charge-42"},{"rule":"pay","key":"acct-1","idempotency_key":"charge-43"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	res := r.JSON(t)["results"].([]any)
	assert.Equal(t, true, res[0].(map[string]any)["repeat"])
	assert.NotContains(t, res[1].(map[string]any), "repeat")
	assert.Equal(t, uint64(2), ta.KeyTotal("pay", "acct-1"))

	// Spent: a new request is denied, and so is its retry, decided again (a
	// denial is not remembered); a repeat of the first request is still
	// allowed.
	r = ta.Post("/v1/check", `{"rule":"pay","key":"acct-1","idempotency_key":"charge-44"}`)
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	r = ta.Post("/v1/check", `{"rule":"pay","key":"acct-1","idempotency_key":"charge-44"}`)
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.NotContains(t, r.JSON(t), "repeat")
	r = ta.Post("/v1/check", `{"rule":"pay","key":"acct-1","idempotency_key":"charge-42"}`)
	assert.Equal(t, http.StatusOK, r.Status)

	// A long idempotency key is hashed, as the proxy hashes its header's.
	longIdem := `{"rule":"pay","key":"acct-2","idempotency_key":"` + strings.Repeat("i", 257) + `"}`
	r = ta.Post("/v1/check", longIdem)
	assert.Equal(t, http.StatusOK, r.Status)
	r = ta.Post("/v1/check", longIdem)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, true, r.JSON(t)["repeat"])

	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_idempotent_repeats_total", "rule", "pay")
	require.True(t, ok)
	assert.Equal(t, 5.0, v)
}

// TestIdempotencyProxy: through proxy mode, a retried request with the same
// Idempotency-Key reaches the upstream again but counts once, and its
// answer says it is a repeat.
func TestIdempotencyProxy(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: per-ip, limit: 2, window: 1m, match: {path_prefix: /api}}
`)+"idempotency: {header: Idempotency-Key}\n")
	for i := range 4 {
		r := ta.Proxy("POST", "/api/pay", "Idempotency-Key", "order-7")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, "1", r.Header.Get("X-RateLimit-Remaining"))
		if i == 0 {
			assert.Empty(t, r.Header.Get("Geolimit-Idempotent-Repeat"))
		} else {
			assert.Equal(t, "true", r.Header.Get("Geolimit-Idempotent-Repeat"))
		}
	}
	assert.Equal(t, 4, up.Count())
	assert.Equal(t, uint64(1), ta.KeyTotal("per-ip", "127.0.0.1"), "four tries, one count")

	r := ta.Proxy("POST", "/api/pay", "Idempotency-Key", "order-8")
	require.Equal(t, http.StatusOK, r.Status)
	r = ta.Proxy("POST", "/api/pay", "Idempotency-Key", "order-9")
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	r = ta.Proxy("POST", "/api/pay", "Idempotency-Key", "order-9")
	assert.Equal(t, http.StatusTooManyRequests, r.Status, "a denied request's retry is decided again: still spent")
	assert.Empty(t, r.Header.Get("Geolimit-Idempotent-Repeat"))
	assert.Equal(t, 5, up.Count())

	r = ta.Proxy("POST", "/api/pay", "Idempotency-Key", "a", "Idempotency-Key", "b")
	assert.Equal(t, http.StatusBadRequest, r.Status, "sent twice: ambiguous")
	assert.Equal(t, 5, up.Count())
}

// TestIdempotencyHeaderConfigured: idempotency.header names another header;
// empty, proxy mode reads none.
func TestIdempotencyHeaderConfigured(t *testing.T) {
	up := servertest.NewUpstream(t)
	rules := "  - {name: per-ip, limit: 5, window: 1m}\n"
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", rules)+"idempotency: {header: X-Request-Id}\n")
	for range 3 {
		require.Equal(t, http.StatusOK, ta.Proxy("GET", "/", "X-Request-Id", "r1", "Idempotency-Key", "x").Status)
	}
	assert.Equal(t, uint64(1), ta.KeyTotal("per-ip", "127.0.0.1"))
	for range 2 {
		require.Equal(t, http.StatusOK, ta.Proxy("GET", "/", "Idempotency-Key", "r2").Status)
	}
	assert.Equal(t, uint64(3), ta.KeyTotal("per-ip", "127.0.0.1"), "Idempotency-Key means nothing here")

	// By default proxy mode reads no header: a client cannot pass free by
	// replaying a key the upstream does not honour.
	off := startApp(t, servertest.ProxyYAML(up.URL, "", rules))
	for range 2 {
		require.Equal(t, http.StatusOK, off.Proxy("GET", "/", "Idempotency-Key", "r1").Status)
	}
	assert.Equal(t, uint64(2), off.KeyTotal("per-ip", "127.0.0.1"), "no header by default: no idempotency keys")
}

func TestIdempotencyForwardAuth(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", "  - {name: per-client, limit: 1, window: 1m}\n", "idempotency: {header: Idempotency-Key}"))
	hdr := servertest.FwdHeaders("POST", "/pay", "203.0.113.9", "Idempotency-Key", "k1")
	for i := range 3 {
		r := ta.ForwardAuth("GET", "/", hdr...)
		require.Equal(t, http.StatusOK, r.Status, "try %d: %s", i, r.Body)
		if i > 0 {
			assert.Equal(t, "true", r.Header.Get("Geolimit-Idempotent-Repeat"))
		}
	}
	assert.Equal(t, uint64(1), ta.KeyTotal("per-client", "203.0.113.9"))
}

func TestIdempotencyRLS(t *testing.T) {
	ta := startApp(t, `
listen: {api: "127.0.0.1:0", grpc: "127.0.0.1:0"}
rules:
  - {name: per-user, limit: 1, window: 1m}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [user_id, idempotency_key], rule: per-user, idempotency_key: idempotency_key}
`)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	for i := range 3 {
		res := servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("user_id", "u1", "idempotency_key", "op-1")))
		assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode(), "try %d", i)
		if i > 0 {
			found := false
			for _, h := range res.GetResponseHeadersToAdd() {
				found = found || (h.GetKey() == "geolimit-idempotent-repeat" && h.GetValue() == "true")
			}
			assert.True(t, found, "try %d says it is a repeat", i)
		}
	}
	assert.Equal(t, uint64(1), ta.KeyTotal("per-user", "u1"), "the idempotency key's entry is not part of the key")
	res := servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("user_id", "u1", "idempotency_key", "op-2")))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
}
