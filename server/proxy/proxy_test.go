package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

const proxyYAML = `
proxy: {trusted_proxies: [10.0.0.1/32]}
rules:
  - {name: per-ip, limit: 2, window: 1m, match: {path_prefix: /api}}
  - name: plan
    key: header:X-User
    tier: header:X-Plan
    limit: 1
    window: 1m
    tiers: {pro: 3}
`

func fronts(t *testing.T) *FrontEnds {
	env, _ := frontendtest.Env(t, proxyYAML)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	return New(env, Metrics{LatencyProxy: h, LatencyMiddleware: h, LatencyForwardAuth: h, UpstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})})
}

func serve(h http.Handler, peer, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestMiddlewareDeniesAndSetsHeaders(t *testing.T) {
	f := fronts(t)
	calls := 0
	h := f.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		assert.NotEmpty(t, w.Header().Get("RateLimit"), "the headers are set before next runs")
	}))
	for range 2 {
		require.Equal(t, http.StatusOK, serve(h, "203.0.113.7:1", "GET", "/api/x").Code)
	}
	w := serve(h, "203.0.113.7:1", "GET", "/api/x")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	assert.JSONEq(t, `{"error":"rate limited","rule":"per-ip","limit":2,"remaining":0,"reset_ms":120000,"retry_after_ms":90000}`, w.Body.String())
	assert.Equal(t, 2, calls)
	assert.Equal(t, http.StatusOK, serve(h, "203.0.113.8:1", "GET", "/api/x").Code, "another client has its own count")
	assert.Equal(t, http.StatusBadRequest, serve(h, "203.0.113.9:1", "GET", "/x", "X-User", "a", "X-User", "b").Code, "a key header sent twice")
}

func TestForwardAuthTierAndOrigin(t *testing.T) {
	f := fronts(t)
	h := f.ForwardAuth()
	fwd := func(peer, user, plan string) int {
		return serve(h, peer, "GET", "/auth", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/x", "X-Forwarded-For", "198.51.100.1",
			"X-User", user, "X-Plan", plan).Code
	}
	ok := 0
	for range 5 {
		if fwd("10.0.0.1:1", "u1", "pro") == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 3, ok, "through the trusted proxy the pro tier applies")
	ok = 0
	for range 5 {
		if fwd("192.0.2.1:1", "u2", "pro") == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 1, ok, "from an untrusted peer the question is the origin, and its tier header is not believed")
	assert.Equal(t, http.StatusBadRequest, serve(h, "10.0.0.1:1", "GET", "/auth", "X-Forwarded-Uri", "/a", "X-Original-URI", "/b").Code,
		"two spellings that disagree")
}
