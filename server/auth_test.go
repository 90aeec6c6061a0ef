package server

import (
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// status sends method path with the given headers and returns the status.
func (ta *testApp) status(method, path string, hdr ...string) int {
	ta.T.Helper()
	return ta.Do(method, ta.API+path, "", hdr...).Status
}

// unauthorized reads geolimit_api_unauthorized_total{reason}.
func (ta *testApp) unauthorized(reason string) float64 {
	ta.T.Helper()
	saved := ta.Token
	ta.Token = servertest.Token1
	defer func() { ta.Token = saved }()
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_api_unauthorized_total", "reason", reason)
	require.True(ta.T, ok)
	return v
}

// TestAPIToken: with api.token_file every API endpoint but /healthz and
// /readyz answers 401 (JSON error, WWW-Authenticate, counted, nothing
// decided) without a token or with another one, and serves every token of
// the file.
func TestAPIToken(t *testing.T) {
	dir := t.TempDir()
	tokFile := servertest.WriteTokens(t, dir, "# current\n"+servertest.Token1+"\n# next, during the rotation\n"+servertest.Token2+"\n")
	ta := startApp(t, servertest.RulesYAML+"api: {token_file: "+tokFile+"}\n")
	check := `{"rule":"r","key":"203.0.113.7"}`

	r := ta.Do(http.MethodPost, ta.API+"/v1/check", check)
	require.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
	assert.Equal(t, `Bearer realm="geolimit"`, r.Header.Get("WWW-Authenticate"))
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	assert.Equal(t, map[string]any{"error": "unauthorized: Authorization: Bearer <token> required"}, r.JSON(t))
	assert.Empty(t, r.Header.Get("RateLimit"))

	for _, hdr := range [][]string{
		bearer("bm90LWEtdG9rZW4tYXQtYWxsLXJlYWxseQ=="),
		bearer(servertest.Token1[:len(servertest.Token1)-1]),
		bearer(servertest.Token1 + "x"),
		bearer(""),
		{"Authorization", "Basic " + servertest.Token1},
		{"Authorization", servertest.Token1},
		{"Authorization", "Bearer " + servertest.Token1, "Authorization", "Bearer " + servertest.Token2},
	} {
		r := ta.Do(http.MethodPost, ta.API+"/v1/check", check, hdr...)
		require.Equal(t, http.StatusUnauthorized, r.Status, "%v: %s", hdr, r.Body)
		assert.Equal(t, `Bearer realm="geolimit", error="invalid_token"`, r.Header.Get("WWW-Authenticate"), "%v", hdr)
		assert.Equal(t, map[string]any{"error": "unauthorized: invalid bearer token"}, r.JSON(t))
	}

	// Both tokens of the file are accepted; the scheme is case-insensitive.
	for _, hdr := range [][]string{bearer(servertest.Token1), bearer(servertest.Token2), {"Authorization", "bearer  " + servertest.Token2}} {
		r := ta.Do(http.MethodPost, ta.API+"/v1/check", check, hdr...)
		require.Equal(t, http.StatusOK, r.Status, "%v: %s", hdr, r.Body)
	}
	assert.EqualValues(t, 3, func() uint64 {
		ta.Token = servertest.Token1
		defer func() { ta.Token = "" }()
		return ta.KeyTotal("r", "203.0.113.7")
	}(),
		"refused requests counted nothing")

	// Every endpoint but the probes needs the token, unknown paths too.
	for _, ep := range []struct{ method, path string }{
		{"POST", "/v1/checks"}, {"GET", "/v1/keys/r/203.0.113.7"}, {"GET", "/v1/status"},
		{"GET", "/metrics"}, {"GET", "/nope"}, {"GET", "/healthz/"}, {"GET", "/"},
	} {
		assert.Equal(t, http.StatusUnauthorized, ta.status(ep.method, ep.path), "%s %s without a token", ep.method, ep.path)
		assert.NotEqual(t, http.StatusUnauthorized, ta.status(ep.method, ep.path, bearer(servertest.Token2)...), "%s %s with a token", ep.method, ep.path)
	}
	assert.Equal(t, http.StatusOK, ta.status("GET", "/healthz"))
	assert.Equal(t, http.StatusOK, ta.status("GET", "/readyz"))
	assert.Equal(t, http.StatusOK, ta.status("GET", "/healthz", bearer("wrong-token-0123456789")...), "a probe ignores a bad token")

	assert.EqualValues(t, 1+7, ta.unauthorized("missing"))
	assert.EqualValues(t, 7, ta.unauthorized("invalid"))
}

// TestAPINoToken: without api.token_file (loopback) nothing asks for a
// token, and a token sent anyway is ignored.
func TestAPINoToken(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	assert.Equal(t, http.StatusOK, ta.status("GET", "/v1/status"))
	assert.Equal(t, http.StatusOK, ta.status("GET", "/v1/status", bearer(servertest.Token1)...))
	assert.EqualValues(t, 0, ta.unauthorized("missing"))
}

// TestAPITokenReload: the token file is read again on every reload (SIGHUP)
// and when it changes on disk (the config watcher polls it): a token
// dropped from the file stops working, a token added starts working, and a
// bad token file keeps the old tokens.
func TestAPITokenReload(t *testing.T) {
	dir := t.TempDir()
	tokFile := servertest.WriteTokens(t, dir, servertest.Token1+"\n")
	var logs servertest.LogBuffer
	ta := startApp(t, servertest.RulesYAML+"api: {token_file: "+tokFile+"}\n", func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	ok := func(tok string) bool { return ta.status("GET", "/v1/status", bearer(tok)...) == http.StatusOK }
	require.True(t, ok(servertest.Token1))
	require.False(t, ok(servertest.Token2))

	// Rotation: the new token is added, clients move to it, the old one goes.
	servertest.WriteTokens(t, dir, servertest.Token1+"\n"+servertest.Token2+"\n")
	require.NoError(t, ta.App.Reload())
	assert.True(t, ok(servertest.Token1))
	assert.True(t, ok(servertest.Token2))
	servertest.WriteTokens(t, dir, servertest.Token2+"\n")
	require.NoError(t, ta.App.Reload())
	assert.False(t, ok(servertest.Token1))
	assert.True(t, ok(servertest.Token2))
	assert.Contains(t, logs.String(), "api tokens changed")
	assert.NotContains(t, logs.String(), "take effect only at restart")

	// A bad token file fails the reload and keeps the old tokens.
	servertest.WriteTokens(t, dir, "short\n")
	err := ta.App.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "api.token_file: "+tokFile+": line 1: token of 5 characters")
	assert.True(t, ok(servertest.Token2))

	// Dropping api.token_file (on loopback) opens the API.
	ta.WriteConfig(servertest.RulesYAML)
	require.NoError(t, ta.App.Reload())
	assert.Equal(t, http.StatusOK, ta.status("GET", "/v1/status"))
}

func TestAPITokenFileWatched(t *testing.T) {
	dir := t.TempDir()
	tokFile := servertest.WriteTokens(t, dir, servertest.Token1+"\n")
	ta := startApp(t, servertest.RulesYAML+"api: {token_file: "+tokFile+"}\n", func(o *Options) { o.WatchInterval = 10 * time.Millisecond })
	ok := func(tok string) bool { return ta.status("GET", "/v1/status", bearer(tok)...) == http.StatusOK }
	require.True(t, ok(servertest.Token1))
	// Only the token file changes; the config file stays as it is.
	servertest.WriteTokens(t, dir, servertest.Token3+"\n")
	require.Eventually(t, func() bool { return ok(servertest.Token3) }, wait, poll, "the new token")
	assert.False(t, ok(servertest.Token1))
}

// keyReplicator is a fakeReplicator that records the configs reloads hand it.
type keyReplicator struct {
	fakeReplicator
	mu   sync.Mutex
	cfgs []*config.Config
}

func (k *keyReplicator) ReloadConfig(cfg *config.Config) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cfgs = append(k.cfgs, cfg)
	return nil
}

func (k *keyReplicator) reloads() []*config.Config {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*config.Config(nil), k.cfgs...)
}

// TestReloadGossipKeys: a replicator that applies gossip keys gets every
// reloaded config, also when only the key file changed on disk, and a
// change of gossip.secret_key_file is not reported as waiting for a restart.
func TestReloadGossipKeys(t *testing.T) {
	dir := t.TempDir()
	keyFile := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p+".tmp", []byte(body), 0o600))
		require.NoError(t, os.Rename(p+".tmp", p))
		return p
	}
	k1 := keyFile("gossip.key", "MDEyMzQ1Njc4OWFiY2RlZg==\n")
	gossip := func(p string) string {
		return "gossip: {bind: '127.0.0.1:0', secret_key_file: " + p + "}\n"
	}
	kr := &keyReplicator{}
	var logs servertest.LogBuffer
	ta := startApp(t, servertest.RulesYAML+gossip(k1), func(o *Options) {
		o.NewReplicator = func(ReplicationEnv) (Replicator, error) { return kr, nil }
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		o.WatchInterval = 10 * time.Millisecond
	})
	keyFile("gossip.key", "ZmVkY2JhOTg3NjU0MzIxMA==\nMDEyMzQ1Njc4OWFiY2RlZg==\n")
	require.Eventually(t, func() bool { return len(kr.reloads()) == 1 }, wait, poll, "the key file reloaded")
	k2 := keyFile("other.key", "ZmVkY2JhOTg3NjU0MzIxMA==\n")
	ta.WriteConfig(servertest.RulesYAML + gossip(k2))
	require.Eventually(t, func() bool { return len(kr.reloads()) == 2 }, wait, poll, "the config reloaded")
	assert.Equal(t, k2, kr.reloads()[1].Gossip.SecretKeyFile)
	assert.NotContains(t, logs.String(), "take effect only at restart")

	// A bad key file fails the reload before the replicator sees it.
	keyFile("other.key", "not base64\n")
	require.Error(t, ta.App.Reload())
	assert.Len(t, kr.reloads(), 2)
}

// Listeners move only at restart: a reload that drops api.token_file while
// the running API listener is beyond loopback is refused, even if the new
// file moves listen.api back to loopback, and the tokens stay.
func TestAPITokensStayWhileExposed(t *testing.T) {
	dir := t.TempDir()
	tokFile := servertest.WriteTokens(t, dir, servertest.Token1+"\n")
	ta := startApp(t, "listen: {api: \"0.0.0.0:0\"}\napi: {token_file: "+tokFile+"}\n"+servertest.RulesYAML)
	_, port, err := net.SplitHostPort(ta.App.APIAddr().String())
	require.NoError(t, err)
	ta.API = "http://127.0.0.1:" + port
	require.Equal(t, http.StatusUnauthorized, ta.status("GET", "/v1/status"))
	ta.WriteConfig("listen: {api: \"127.0.0.1:0\"}\n" + servertest.RulesYAML)
	err = ta.App.Reload()
	require.ErrorContains(t, err, "api.token_file: required while listen.api 0.0.0.0:0 (running) is beyond loopback")
	assert.Equal(t, http.StatusUnauthorized, ta.status("GET", "/v1/status"), "the tokens stay")
	assert.Equal(t, http.StatusOK, ta.status("GET", "/v1/status", bearer(servertest.Token1)...))
}

// TestAPITokenScopes: api.tokens grants each token only its scopes. A
// metrics-only token (Prometheus's) reads /metrics and is refused, 403
// naming the scope and spending nothing, on the kill switch and on
// /v1/check; api.token_file's tokens keep every scope.
func TestAPITokenScopes(t *testing.T) {
	dir := t.TempDir()
	admin := servertest.WriteTokens(t, dir, servertest.Token1+"\n")
	file := func(name, tok string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(tok+"\n"), 0o600))
		return p
	}
	const (
		tokMetrics = "bWV0cmljcy1vbmx5LXRva2VuLTAxMjM0NTY3"
		tokApp     = "YXBwLXJlYWQtZGVjaWRlLTAxMjM0NTY3ODk="
	)
	ta := startApp(t, servertest.RulesYAML+"api:\n  token_file: "+admin+"\n  tokens:\n"+
		"    - {file: "+file("metrics", tokMetrics)+", scopes: [metrics]}\n"+
		"    - {file: "+file("app", tokApp)+", scopes: [read, decide]}\n")
	check := `{"rule":"r","key":"203.0.113.7"}`

	// The metrics token.
	r := ta.Do(http.MethodGet, ta.API+"/metrics", "", bearer(tokMetrics)...)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Contains(t, string(r.Body), "geolimit_decisions_total")
	r = ta.Do(http.MethodPut, ta.API+"/v1/rules/r/mode", `{"mode":"off"}`, bearer(tokMetrics)...)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	assert.Equal(t, map[string]any{"error": "forbidden: this token lacks the scope admin", "scope": "admin"}, r.JSON(t))
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	r = ta.Do(http.MethodPost, ta.API+"/v1/check", check, bearer(tokMetrics)...)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	assert.Equal(t, map[string]any{"error": "forbidden: this token lacks the scope decide", "scope": "decide"}, r.JSON(t))

	// Each endpoint and who may use it.
	for _, ep := range []struct {
		method, path, body string
		scope              string // the scope needed
	}{
		{"GET", "/metrics", "", "metrics"},
		{"GET", "/v1/status", "", "read"},
		{"GET", "/v1/keys/r/203.0.113.7", "", "read"},
		{"GET", "/v1/rules/r/mode", "", "read"},
		{"POST", "/v1/check", `{"rule":"big","key":"k"}`, "decide"},
		{"POST", "/v1/checks", `{"checks":[{"rule":"big","key":"k"}]}`, "decide"},
		{"POST", "/v1/acquire", `{"rule":"r","key":"k"}`, "decide"},
		{"POST", "/v1/release", `{"rule":"r","key":"k","lease":"x"}`, "decide"},
		{"PUT", "/v1/rules/r/mode", `{"mode":"config"}`, "admin"},
		{"GET", "/nope", "", "admin"},
	} {
		for _, tok := range []struct {
			tok    string
			scopes []string
		}{{tokMetrics, []string{"metrics"}}, {tokApp, []string{"read", "decide"}}, {servertest.Token1, []string{"metrics", "read", "decide", "admin"}}} {
			r := ta.Do(ep.method, ta.API+ep.path, ep.body, bearer(tok.tok)...)
			if slices.Contains(tok.scopes, ep.scope) {
				assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, r.Status, "%s %s with %v: %s", ep.method, ep.path, tok.scopes, r.Body)
				continue
			}
			if assert.Equal(t, http.StatusForbidden, r.Status, "%s %s with %v: %s", ep.method, ep.path, tok.scopes, r.Body) {
				assert.Equal(t, ep.scope, r.JSON(t)["scope"])
			}
		}
	}
	// Without a token, or with a bad one, 401 as before.
	assert.Equal(t, http.StatusUnauthorized, ta.status("GET", "/metrics"))
	assert.Equal(t, http.StatusUnauthorized, ta.status("GET", "/metrics", bearer(tokMetrics+"x")...))

	ta.Token = servertest.Token1
	assert.EqualValues(t, 0, ta.KeyTotal("r", "203.0.113.7"), "the refused check counted nothing")
	assert.EqualValues(t, 2*2*2, ta.KeyTotal("big", "k"), "the checks of the app and admin tokens counted (cost 2), no other")
	mode := ta.Get("/v1/rules/r/mode").JSON(t)
	assert.Equal(t, "enforce", mode["mode"], "the metrics token did not switch the rule")
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_api_forbidden_total", "scope", "admin")
	require.True(t, ok)
	assert.EqualValues(t, 1+2*2, v, "the metrics token's two PUTs and /nope, the app token's PUT and /nope")
}
