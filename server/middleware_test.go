package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
)

// The middleware and the proxy listener are one decision path: they share
// the rule table and the counts, and answer alike.
func TestMiddlewareSharesProxyPath(t *testing.T) {
	up := newUpstream(t)
	ta := startApp(t, proxyYAML(up.URL, "", `
  - {name: narrow, limit: 3, window: 1m, match: {path_prefix: /api}}
`))
	calls := 0
	mw := httptest.NewServer(ta.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		assert.NotEmpty(t, w.Header().Get("RateLimit"), "headers are set before next runs")
	})))
	t.Cleanup(mw.Close)
	require.Equal(t, http.StatusOK, ta.proxy("GET", "/api").status)
	r := ta.do("GET", mw.URL+"/api", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "1", r.header.Get("X-RateLimit-Remaining"), "the proxy's request counted")
	require.Equal(t, http.StatusOK, ta.proxy("GET", "/api").status)
	r = ta.do("GET", mw.URL+"/api", "")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "narrow", r.json(t)["rule"])
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	assert.Equal(t, 1, calls)
	assert.EqualValues(t, 3, ta.keyTotal("narrow", "127.0.0.1"))
	assert.EqualValues(t, 1, ta.decisions("narrow", "denied"))
}

// Options.Embedded opens none of the listen section's listeners.
func TestEmbeddedOpensNoListener(t *testing.T) {
	cfg, err := config.Parse([]byte(`
node: {id: ams-1, region: eu, pop: ams}
listen: {api: "127.0.0.1:0", proxy: "127.0.0.1:0", forward_auth: "127.0.0.1:0"}
proxy: {upstream: "http://127.0.0.1:1"}
nats: {disabled: true}
rules:
  - {name: r, limit: 1, window: 1m}
`))
	require.NoError(t, err)
	app, err := New(Options{Config: cfg, Self: testSelf, Embedded: true, WatchInterval: -1, Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, app.Shutdown(ctx))
	})
	assert.True(t, app.Ready())
	assert.Nil(t, app.APIAddr())
	assert.Nil(t, app.ProxyAddr())
	assert.Nil(t, app.ForwardAuthAddr())
	assert.Nil(t, app.GRPCAddr())
	assert.Empty(t, app.NATSURL())

	h := app.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil) // RemoteAddr 192.0.2.1:1234
		h.ServeHTTP(rec, req)
		assert.Equal(t, want, rec.Code, "request %d", i)
	}
}
