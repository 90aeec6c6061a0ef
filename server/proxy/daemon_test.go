package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProxyDeny(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: per-ip, limit: 2, window: 1m, match: {path_prefix: /api}}
`))
	for i := 0; i < 2; i++ {
		r := ta.Proxy("GET", "/api/x")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, "hello from upstream GET /api/x", string(r.Body))
		assert.Equal(t, "yes", r.Header.Get("X-Upstream"))
		assert.Equal(t, `"per-ip";q=2;w=60`, r.Header.Get("RateLimit-Policy"))
		_, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
		assert.EqualValues(t, 1-i, p["r"])
		assert.EqualValues(t, 1-i, servertest.HeaderInt(t, r.Header, "X-RateLimit-Remaining"))
	}
	r := ta.Proxy("GET", "/api/x")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, 2, up.Count(), "the denied request never reached the upstream")
	body := r.JSON(t)
	assert.Equal(t, "rate limited", body["error"])
	assert.Equal(t, "per-ip", body["rule"])
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	retry := servertest.HeaderInt(t, r.Header, "Retry-After")
	assert.Positive(t, retry)
	assert.Equal(t, `"per-ip";q=2;w=60`, r.Header.Get("RateLimit-Policy"))
	name, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, "per-ip", name)
	assert.Equal(t, map[string]int64{"r": 0, "t": retry}, p)
	assert.EqualValues(t, 2, servertest.HeaderInt(t, r.Header, "X-RateLimit-Limit"))
	assert.EqualValues(t, 0, servertest.HeaderInt(t, r.Header, "X-RateLimit-Remaining"))
	assert.Equal(t, retry, servertest.HeaderInt(t, r.Header, "X-RateLimit-Reset"))

	// Paths the rule does not match pass without RateLimit fields.
	r = ta.Proxy("GET", "/static/app.js")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Empty(t, r.Header.Get("RateLimit"))
	assert.EqualValues(t, 2, ta.KeyTotal("per-ip", "127.0.0.1"))
	assert.EqualValues(t, 1, ta.Decisions("per-ip", "denied"))
}

func TestProxyMatchAndKeys(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: token, limit: 100, window: 1m, key: "header:X-Api-Key", match: {methods: [POST]}}
  - {name: host, limit: 100, window: 1m, key: host, match: {host: Example.COM}}
  - {name: path, limit: 100, window: 1m, key: path, match: {path_prefix: /p/}}
  - {name: combo, limit: 100, window: 1m, key: [ip, "header:X-Api-Key"], match: {path_prefix: /c}}
`))
	ta.Proxy("POST", "/a", "X-Api-Key", "t1")
	ta.Proxy("GET", "/a", "X-Api-Key", "t1") // wrong method
	ta.Proxy("POST", "/a")                   // no header: the rule does not apply
	ta.Proxy("GET", "/h", "Host", "example.com:8443")
	ta.Proxy("GET", "/h", "Host", "other.org")
	ta.Proxy("GET", "/p/one")
	ta.Proxy("GET", "/p/one")
	ta.Proxy("GET", "/c", "X-Api-Key", "t2")
	assert.EqualValues(t, 1, ta.KeyTotal("token", "t1"))
	assert.EqualValues(t, 1, ta.KeyTotal("host", "example.com"))
	assert.EqualValues(t, 0, ta.KeyTotal("host", "other.org"))
	assert.EqualValues(t, 2, ta.KeyTotal("path", "%2Fp%2Fone"))
	assert.EqualValues(t, 1, ta.KeyTotal("combo", "127.0.0.1%7Ct2"))
	assert.Equal(t, 8, up.Count())

	long := "/p/" + strings.Repeat("x", 300)
	require.Equal(t, http.StatusOK, ta.Proxy("GET", long).Status)
	assert.EqualValues(t, 1, ta.KeyTotal("path", url.PathEscape(long)), "long keys are hashed, and looked up by their value")
}

// TestProxyAND: every applicable rule is checked; a request denied by one
// rule spends nothing of the others.
func TestProxyAND(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: wide, limit: 10, window: 1m}
  - {name: narrow, limit: 2, window: 1m, match: {path_prefix: /api}}
  - {name: watch, limit: 1, window: 1m, mode: shadow}
`))
	r := ta.Proxy("GET", "/api")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"narrow";q=2;w=60`, r.Header.Get("RateLimit-Policy"), "the rule with the least remaining binds")
	r = ta.Proxy("GET", "/api")
	require.Equal(t, http.StatusOK, r.Status, "shadow rule over its limit still admits")
	for i := 0; i < 3; i++ {
		r = ta.Proxy("GET", "/api")
		require.Equal(t, http.StatusTooManyRequests, r.Status)
		assert.Equal(t, `"narrow";q=2;w=60`, r.Header.Get("RateLimit-Policy"))
	}
	assert.EqualValues(t, 2, ta.KeyTotal("wide", "127.0.0.1"), "denied requests spent nothing of the wider rule")
	assert.EqualValues(t, 1, ta.KeyTotal("watch", "127.0.0.1"))
	assert.EqualValues(t, 1, ta.Decisions("watch", "shadow_denied"))
	assert.EqualValues(t, 3, ta.Decisions("narrow", "denied"))
	assert.EqualValues(t, 2, ta.Decisions("wide", "allowed"))
	assert.Equal(t, 2, up.Count())

	r = ta.Proxy("GET", "/other")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"wide";q=10;w=60`, r.Header.Get("RateLimit-Policy"))
}

func TestProxyUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	ta := startApp(t, servertest.ProxyYAML(url, "", `
  - {name: r, limit: 10, window: 1m}
`))
	r := ta.Proxy("GET", "/x")
	require.Equal(t, http.StatusBadGateway, r.Status)
	assert.Equal(t, "upstream unavailable", r.JSON(t)["error"])
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_proxy_upstream_errors_total")
	require.True(t, ok)
	assert.EqualValues(t, 1, v)
}

func TestProxyForwardedFor(t *testing.T) {
	up := servertest.NewUpstream(t)
	tests := []struct {
		name, trusted, xff string
		key, upstreamXFF   string
	}{
		{"untrusted peer: header ignored", "10.0.0.0/8", "6.6.6.6", "127.0.0.1", "127.0.0.1"},
		{"trusted peer: rightmost untrusted hop", "127.0.0.1/32", "6.6.6.6, 198.51.100.9", "198.51.100.9", "6.6.6.6, 198.51.100.9, 127.0.0.1"},
		{"trusted peer without header", "127.0.0.1/32", "", "127.0.0.1", "127.0.0.1"},
		{"trusted chain", "127.0.0.1, 10.0.0.0/8", "6.6.6.6, 198.51.100.9, 10.1.2.3", "198.51.100.9", "6.6.6.6, 198.51.100.9, 10.1.2.3, 127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := startApp(t, servertest.ProxyYAML(up.URL, tt.trusted, "  - {name: ip, limit: 100, window: 1m}\n"))
			var hdr []string
			if tt.xff != "" {
				hdr = []string{"X-Forwarded-For", tt.xff}
			}
			require.Equal(t, http.StatusOK, ta.Proxy("GET", "/", hdr...).Status)
			assert.EqualValues(t, 1, ta.KeyTotal("ip", tt.key))
			got := up.Last(t)
			assert.Equal(t, tt.upstreamXFF, got.Header.Get("X-Forwarded-For"))
			assert.Equal(t, "http", got.Header.Get("X-Forwarded-Proto"))
			assert.NotEmpty(t, got.Header.Get("X-Forwarded-Host"))
		})
	}
}

// TestProxyDotSegments: a path that names /api/x once its dot segments or
// repeated slashes are resolved is counted as /api/x.
func TestProxyDotSegments(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: api, limit: 100, window: 1m, match: {path_prefix: /api/}, key: [ip, path]}
`))
	for _, p := range []string{"/api/x", "/static/../api/x", "/api//x", "/api/./x", "/static/%2e%2e/api/x"} {
		req, err := http.NewRequest("GET", "http://"+ta.App.ProxyAddr().String()+"/", nil)
		require.NoError(t, err)
		req.URL.Opaque = p // sent as written, not cleaned by the client
		res, err := ta.Client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, p)
	}
	assert.EqualValues(t, 5, ta.KeyTotal("api", "127.0.0.1%7C%2Fapi%2Fx"))
	assert.Equal(t, "/static/../api/x", up.Requests()[1].URL.Path, "the upstream gets the path as sent")
}

// The upstream gets the upstream URL's host by default, the client's Host
// with proxy.preserve_host.
func TestProxyPreserveHost(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		t.Run(fmt.Sprint("preserve_host=", preserve), func(t *testing.T) {
			up := servertest.NewUpstream(t)
			yaml := strings.Replace(servertest.ProxyYAML(up.URL, "", "  - {name: r, limit: 10, window: 1m}"),
				"proxy: {", fmt.Sprintf("proxy: {preserve_host: %v, ", preserve), 1)
			ta := startApp(t, yaml)
			r := ta.Proxy("GET", "/x", "Host", "shop.example.com")
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			want := strings.TrimPrefix(up.URL, "http://")
			if preserve {
				want = "shop.example.com"
			}
			assert.Equal(t, want, up.Last(t).Host)
		})
	}
}

// A header a rule keys on, sent twice, is refused with 400 and counts
// nothing (on any rule): geolimit cannot know which value the upstream will
// use, and counting the first would let a client spend another's budget
// while the upstream authenticates the second.
func TestProxyDuplicateKeyHeader(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: per-key, limit: 5, window: 1m, key: "header:X-Api-Key"}
  - {name: per-ip, limit: 100, window: 1m}
`))
	r := ta.Proxy("GET", "/x", "X-Api-Key", "victim", "X-Api-Key", "mine")
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, string(r.Body), "X-Api-Key: sent more than once")
	assert.Zero(t, up.Count())
	assert.EqualValues(t, 0, ta.KeyTotal("per-key", "victim"))
	assert.EqualValues(t, 0, ta.KeyTotal("per-ip", "127.0.0.1"))
	r = ta.Proxy("GET", "/x", "X-Api-Key", "mine")
	assert.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, 1, ta.KeyTotal("per-key", "mine"))
}

// A method rule matches whatever the letter case: "pOst" cannot escape a
// POST rule at an upstream that reads methods loosely.
func TestProxyMethodCase(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", "  - {name: login, limit: 1, window: 1m, match: {methods: [POST]}}"))
	require.Equal(t, http.StatusOK, ta.Proxy("POST", "/login").Status)
	assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("pOst", "/login").Status)
}

// TestProxyIgnoreCase: with match.ignore_case, /Login, /LOGIN and /%4cogin
// count against a /login rule (many upstreams route them to one handler);
// without it they are other paths.
func TestProxyIgnoreCase(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: login, limit: 3, window: 1m, match: {path_prefix: /login, ignore_case: true}}
  - {name: exact, limit: 1, window: 1m, match: {path_prefix: /exact}}
`))
	for _, p := range []string{"/login", "/Login", "/%4cogin"} {
		require.Equal(t, http.StatusOK, ta.Proxy("POST", p).Status, p)
	}
	assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("POST", "/LOGIN").Status)
	require.Equal(t, http.StatusOK, ta.Proxy("GET", "/exact").Status)
	assert.Equal(t, http.StatusOK, ta.Proxy("GET", "/Exact").Status, "case-sensitive by default")
	assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("GET", "/exact").Status)
}
