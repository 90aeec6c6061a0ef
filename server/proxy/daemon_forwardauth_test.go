package proxy_test

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/geolimit/geolimit/server"
	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestForwardAuthAllowDeny(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", `
  - {name: per-ip, limit: 2, window: 1m, match: {path_prefix: /api}}
`, ""))
	// Any method and path for the question: nginx and Traefik ask with GET,
	// others may not.
	for i, m := range []string{"GET", "POST"} {
		r := ta.ForwardAuth(m, "/auth", servertest.FwdHeaders("GET", "/api/x?page=2", "198.51.100.9")...)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Empty(t, r.Body)
		assert.Equal(t, `"per-ip";q=2;w=60`, r.Header.Get("RateLimit-Policy"))
		assert.EqualValues(t, 1-i, servertest.HeaderInt(t, r.Header, "X-RateLimit-Remaining"))
		assert.Empty(t, r.Header.Get("Retry-After"))
	}
	r := ta.ForwardAuth("HEAD", "/", servertest.FwdHeaders("GET", "/api/x", "198.51.100.9")...)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	retry := servertest.HeaderInt(t, r.Header, "Retry-After")
	assert.Positive(t, retry)
	name, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, "per-ip", name)
	assert.Equal(t, map[string]int64{"r": 0, "t": retry}, p)

	r = ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/api/x", "198.51.100.9")...)
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	body := r.JSON(t)
	assert.Equal(t, "rate limited", body["error"])
	assert.Equal(t, "per-ip", body["rule"])
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))

	// Another client, and a path no rule matches.
	require.Equal(t, http.StatusOK, ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/api/x", "198.51.100.10")...).Status)
	r = ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/static/app.js", "198.51.100.9")...)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Empty(t, r.Header.Get("RateLimit"))

	assert.EqualValues(t, 2, ta.KeyTotal("per-ip", "198.51.100.9"))
	assert.EqualValues(t, 1, ta.KeyTotal("per-ip", "198.51.100.10"))
	assert.EqualValues(t, 0, ta.KeyTotal("per-ip", "127.0.0.1"), "the proxy's own address is never the key")
	assert.EqualValues(t, 2, ta.Decisions("per-ip", "denied"))
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_decision_duration_seconds", "endpoint", "forward_auth")
	require.True(t, ok)
	assert.EqualValues(t, 6, v)
}

// TestForwardAuthOriginal: nginx's spelling, X-Original-URI and
// X-Original-Method, and the rules' method, host and path matching.
func TestForwardAuthOriginal(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", `
  - {name: login, limit: 10, window: 1m, match: {methods: [POST], path_prefix: /login}, key: [ip, host, path]}
`, ""))
	nginx := func(method, uri string) []string {
		return []string{"X-Original-Method", method, "X-Original-URI", uri, "X-Forwarded-For", "203.0.113.7", "X-Forwarded-Host", "Shop.Example.com:443"}
	}
	require.Equal(t, http.StatusOK, ta.ForwardAuth("GET", "/_geolimit", nginx("POST", "/login")...).Status)
	require.Equal(t, http.StatusOK, ta.ForwardAuth("GET", "/_geolimit", nginx("GET", "/login")...).Status)
	require.Equal(t, http.StatusOK, ta.ForwardAuth("GET", "/_geolimit", nginx("POST", "/static/../login/%2e/")...).Status)
	assert.EqualValues(t, 1, ta.KeyTotal("login", url.PathEscape("203.0.113.7|shop.example.com|/login")))
	assert.EqualValues(t, 1, ta.KeyTotal("login", url.PathEscape("203.0.113.7|shop.example.com|/login/")),
		"dot segments are resolved as in proxy mode")
	assert.EqualValues(t, 2, ta.Decisions("login", "allowed"), "the GET matched no rule")

	// Both spellings may be sent when they agree.
	r := ta.ForwardAuth("GET", "/", append(nginx("POST", "/login"), "X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login")...)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.EqualValues(t, 2, ta.KeyTotal("login", url.PathEscape("203.0.113.7|shop.example.com|/login")))
}

// TestForwardAuthUntrusted: from a peer outside trusted_proxies the
// describing headers are ignored; the question itself is judged, as the
// proxy listener would judge it.
func TestForwardAuthUntrusted(t *testing.T) {
	var logs servertest.LogBuffer
	ta := startApp(t, servertest.ForwardAuthYAML("10.0.0.0/8", `
  - {name: api, limit: 10, window: 1m, match: {path_prefix: /api, host: app.example.com}}
`, ""), func(o *server.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	r := ta.ForwardAuth("GET", "/static", servertest.FwdHeaders("GET", "/api/x", "198.51.100.9")...)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Empty(t, r.Header.Get("RateLimit"), "the untrusted X-Forwarded-Uri is not believed")
	r = ta.ForwardAuth("GET", "/api/y", append(servertest.FwdHeaders("GET", "/static", "198.51.100.9"), "Host", "app.example.com")...)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"api";q=10;w=60`, r.Header.Get("RateLimit-Policy"), "the request line is judged")
	assert.EqualValues(t, 1, ta.KeyTotal("api", "127.0.0.1"), "the peer's address is the key")
	assert.EqualValues(t, 0, ta.KeyTotal("api", "198.51.100.9"))
	assert.Equal(t, 1, strings.Count(logs.String(), "add the proxy's address to proxy.trusted_proxies"),
		"a likely missing trusted proxy is logged, once")
}

func TestForwardAuthDenyStatus(t *testing.T) {
	rules := "  - {name: one, limit: 1, window: 1m}\n"
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", rules, "forward_auth: {deny_status: 403}"))
	ask := func(more ...string) servertest.Resp {
		return ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/", "198.51.100.9", more...)...)
	}
	require.Equal(t, http.StatusOK, ask().Status)
	r := ask()
	require.Equal(t, http.StatusForbidden, r.Status, "forward_auth.deny_status")
	assert.Positive(t, servertest.HeaderInt(t, r.Header, "Retry-After"))
	assert.Equal(t, "rate limited", r.JSON(t)["error"])
	r = ask("X-Geolimit-Deny-Status", "401")
	require.Equal(t, http.StatusUnauthorized, r.Status, "the request's own status")
	assert.Positive(t, servertest.HeaderInt(t, r.Header, "Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, ask("X-Geolimit-Deny-Status", " 429 ").Status)

	for _, bad := range [][]string{
		{"X-Geolimit-Deny-Status", "500"},
		{"X-Geolimit-Deny-Status", "200"},
		{"X-Geolimit-Deny-Status", "forbidden"},
		{"X-Geolimit-Deny-Status", "403", "X-Geolimit-Deny-Status", "401"},
	} {
		r := ask(bad...)
		require.Equal(t, http.StatusBadRequest, r.Status, "%q", bad)
		assert.Contains(t, r.JSON(t)["error"], "X-Geolimit-Deny-Status: ")
	}
	assert.EqualValues(t, 3, ta.Decisions("one", "denied"), "bad requests are not decided")

	// A reload applies a new default.
	ta.WriteConfig(servertest.ForwardAuthYAML("127.0.0.1", rules, "forward_auth: {deny_status: 401}"))
	require.NoError(t, ta.App.Reload())
	require.Equal(t, http.StatusUnauthorized, ask().Status)
}

// TestForwardAuthBadOrigin: an ambiguous or malformed description is a
// 400 naming the header, and counts nothing.
func TestForwardAuthBadOrigin(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", "  - {name: all, limit: 100, window: 1m}\n", ""))
	tests := []struct {
		name string
		hdr  []string
		want string
	}{
		{"spellings disagree on the URI", []string{"X-Forwarded-Uri", "/api", "X-Original-URI", "/static"},
			`X-Forwarded-Uri "/api" and X-Original-URI "/static" disagree`},
		{"spellings disagree on the method", []string{"X-Forwarded-Method", "GET", "X-Original-Method", "POST"},
			`X-Forwarded-Method "GET" and X-Original-Method "POST" disagree`},
		{"URI twice", []string{"X-Forwarded-Uri", "/a", "X-Forwarded-Uri", "/b"}, "X-Forwarded-Uri: sent 2 times; want one value"},
		{"host twice", []string{"X-Forwarded-Host", "a.example", "X-Forwarded-Host", "b.example"}, "X-Forwarded-Host: sent 2 times"},
		{"empty method", []string{"X-Original-Method", ""}, "X-Original-Method: empty"},
		{"method not a token", []string{"X-Forwarded-Method", "GET /x"}, `"GET /x" is not an HTTP method`},
		{"absolute URI", []string{"X-Forwarded-Uri", "http://evil.example/api"}, "is not a request URI such as /api/v1?page=2"},
		{"relative URI", []string{"X-Original-URI", "api/x"}, "is not a request URI"},
		{"bad escape", []string{"X-Forwarded-Uri", "/api/%zz"}, "is not a request URI"},
		{"host list", []string{"X-Forwarded-Host", "a.example, b.example"}, `X-Forwarded-Host: "a.example, b.example" is not a host[:port]`},
		{"host with quotes", []string{"X-Forwarded-Host", `zzz","rule":"shadow-all`}, "X-Forwarded-Host:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ta.ForwardAuth("GET", "/", tt.hdr...)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
			assert.Contains(t, r.JSON(t)["error"], tt.want)
		})
	}
	assert.EqualValues(t, 0, ta.Decisions("all", "allowed"))
}

// TestForwardAuthAND: the proxy mode's AND, binding rule, shadow rules
// and nothing spent on a denial.
func TestForwardAuthAND(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", `
  - {name: wide, limit: 10, window: 1m}
  - {name: narrow, limit: 2, window: 1m, match: {path_prefix: /api}}
  - {name: watch, limit: 1, window: 1m, mode: shadow}
`, ""))
	ask := func(uri string) servertest.Resp {
		return ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", uri, "198.51.100.9")...)
	}
	r := ask("/api")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"narrow";q=2;w=60`, r.Header.Get("RateLimit-Policy"), "the rule with the least remaining binds")
	require.Equal(t, http.StatusOK, ask("/api").Status, "a shadow rule over its limit still admits")
	for i := 0; i < 3; i++ {
		r = ask("/api")
		require.Equal(t, http.StatusTooManyRequests, r.Status)
		assert.Equal(t, `"narrow";q=2;w=60`, r.Header.Get("RateLimit-Policy"))
	}
	assert.EqualValues(t, 2, ta.KeyTotal("wide", "198.51.100.9"), "denied requests spent nothing of the wider rule")
	assert.EqualValues(t, 1, ta.KeyTotal("watch", "198.51.100.9"))
	assert.EqualValues(t, 1, ta.Decisions("watch", "shadow_denied"))
	assert.EqualValues(t, 3, ta.Decisions("narrow", "denied"))
	r = ask("/other")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"wide";q=10;w=60`, r.Header.Get("RateLimit-Policy"))
}

// TestForwardAuthInjection: header values are data. Values that, pasted
// into a JSON body, would name another rule or key change nothing: they are
// the key they are, or refused.
func TestForwardAuthInjection(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", `
  - {name: per-customer, limit: 2, window: 1m, key: "header:X-Customer"}
  - {name: per-path, limit: 100, window: 1m, key: path}
  - {name: shadow-all, limit: 1000, window: 1m, mode: shadow}
`, ""))
	const (
		toShadow = `zzz","rule":"shadow-all`
		toOther  = `mine","key":"other-customer`
	)
	ask := func(customer string, more ...string) servertest.Resp {
		return ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/api", "198.51.100.9", append([]string{"X-Customer", customer}, more...)...)...)
	}
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, ask(toOther).Status)
		require.Equal(t, http.StatusOK, ask(toShadow).Status)
	}
	require.Equal(t, http.StatusTooManyRequests, ask(toOther).Status, "the injected value is its own key, limited by its rule")
	require.Equal(t, http.StatusTooManyRequests, ask(toShadow).Status, "and stays under the enforce rule")
	assert.EqualValues(t, 2, ta.KeyTotal("per-customer", url.PathEscape(toOther)))
	assert.EqualValues(t, 2, ta.KeyTotal("per-customer", url.PathEscape(toShadow)))
	assert.EqualValues(t, 0, ta.KeyTotal("per-customer", "other-customer"))
	assert.EqualValues(t, 0, ta.KeyTotal("per-customer", "mine"))
	assert.EqualValues(t, 0, ta.KeyTotal("per-customer", "zzz"))
	require.Equal(t, http.StatusOK, ask("other-customer").Status, "the other customer's quota is whole")

	// In the URI and the client address.
	r := ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/x?"+url.QueryEscape(toShadow), toOther, "X-Customer", "c1")...)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1, ta.KeyTotal("per-path", url.PathEscape("/x")), "the query is not part of the path")
	assert.EqualValues(t, 1, ta.KeyTotal("shadow-all", "127.0.0.1"),
		"an unparsable X-Forwarded-For entry stops the walk at the trusted proxy")
	r = ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/"+url.PathEscape(toOther), "198.51.100.9")...)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1, ta.KeyTotal("per-path", url.PathEscape("/"+toOther)))
	assert.EqualValues(t, 6, ta.KeyTotal("shadow-all", "198.51.100.9"), "every allowed request counted once on the shadow rule")
	assert.Zero(t, ta.Decisions("shadow-all", "shadow_denied"))
	assert.Empty(t, strings.TrimSpace(string(r.Body)))
}

// A raw fragment in the described URI (nginx's $request_uri keeps one,
// while nginx routes the path before it) cannot move the request off a path
// rule or onto a key of its own.
func TestForwardAuthFragment(t *testing.T) {
	ta := startApp(t, servertest.ForwardAuthYAML("127.0.0.1", `
  - {name: api, limit: 1, window: 1m, match: {path_prefix: /api/}}
  - {name: per-path, limit: 100, window: 1m, key: path}
`, ""))
	require.Equal(t, http.StatusOK, ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/api/x", "198.51.100.9")...).Status)
	for _, uri := range []string{"/api/x#/../../o1", "/api/x#frag", "/api/x?a=1#/../../o2"} {
		r := ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", uri, "198.51.100.9")...)
		assert.Equal(t, http.StatusTooManyRequests, r.Status, "%s: judged as /api/x", uri)
	}
	assert.EqualValues(t, 1, ta.KeyTotal("per-path", url.PathEscape("/api/x")))
}
