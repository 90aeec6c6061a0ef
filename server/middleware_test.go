package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// The middleware and the proxy listener are one decision path: they share
// the rule table and the counts, and answer alike.
func TestMiddlewareSharesProxyPath(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: narrow, limit: 3, window: 1m, match: {path_prefix: /api}}
`))
	calls := 0
	mw := httptest.NewServer(ta.App.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		assert.NotEmpty(t, w.Header().Get("RateLimit"), "headers are set before next runs")
	})))
	t.Cleanup(mw.Close)
	require.Equal(t, http.StatusOK, ta.Proxy("GET", "/api").Status)
	r := ta.Do("GET", mw.URL+"/api", "")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "1", r.Header.Get("X-RateLimit-Remaining"), "the proxy's request counted")
	require.Equal(t, http.StatusOK, ta.Proxy("GET", "/api").Status)
	r = ta.Do("GET", mw.URL+"/api", "")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, "narrow", r.JSON(t)["rule"])
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, 1, calls)
	assert.EqualValues(t, 3, ta.KeyTotal("narrow", "127.0.0.1"))
	assert.EqualValues(t, 1, ta.Decisions("narrow", "denied"))
}

// The daemon opens its listeners: Options.IgnoreListen (the engine's, for
// a program that embeds geolimit with middleware.New) is refused.
func TestIgnoreListenRefused(t *testing.T) {
	cfg, err := config.Parse([]byte("nats: {disabled: true}\nrules:\n  - {name: r, limit: 1, window: 1m}\n"))
	require.NoError(t, err)
	_, err = New(Options{Config: cfg, Self: testSelf, IgnoreListen: true, WatchInterval: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "IgnoreListen")
	assert.Contains(t, err.Error(), "middleware.New")
}
