package servertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Upstream is a real HTTP server that records what reached it.
type Upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

// NewUpstream starts an Upstream; it stops when the test ends.
func NewUpstream(t *testing.T) *Upstream {
	u := &Upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.reqs = append(u.reqs, r.Clone(r.Context()))
		u.mu.Unlock()
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "hello from upstream %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

// Last returns the last request that reached u.
func (u *Upstream) Last(t *testing.T) *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	require.NotEmpty(t, u.reqs)
	return u.reqs[len(u.reqs)-1]
}

// Requests returns the requests that reached u, in order.
func (u *Upstream) Requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.reqs...)
}

// Count returns how many requests reached u.
func (u *Upstream) Count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

// ProxyYAML is a config with the reverse proxy on a free port in front of
// upstreamURL, trusted proxies and rules.
func ProxyYAML(upstreamURL, trusted, rules string) string {
	return fmt.Sprintf(`
listen: {api: "127.0.0.1:0", proxy: "127.0.0.1:0"}
proxy: {upstream: %q, trusted_proxies: [%s]}
rules:
%s`, upstreamURL, trusted, rules)
}

// Proxy sends a request through the daemon's reverse proxy.
func (a *Harness[D]) Proxy(method, path string, hdr ...string) Resp {
	a.T.Helper()
	return a.Do(method, "http://"+a.App.ProxyAddr().String()+path, "", hdr...)
}

// ForwardAuthYAML is a config with the forward-auth listener on a free
// port, trusted proxies and rules; extra is added at the top level.
func ForwardAuthYAML(trusted, rules, extra string) string {
	return fmt.Sprintf(`
listen: {api: "127.0.0.1:0", forward_auth: "127.0.0.1:0"}
proxy: {trusted_proxies: [%s]}
%s
rules:
%s`, trusted, extra, rules)
}

// ForwardAuth sends a forward-auth request (method and path of the
// question itself).
func (a *Harness[D]) ForwardAuth(method, path string, hdr ...string) Resp {
	a.T.Helper()
	return a.Do(method, "http://"+a.App.ForwardAuthAddr().String()+path, "", hdr...)
}

// FwdHeaders returns the headers a trusted proxy sends to describe a
// request.
func FwdHeaders(method, uri, client string, more ...string) []string {
	return append([]string{"X-Forwarded-Method", method, "X-Forwarded-Uri", uri, "X-Forwarded-For", client,
		"X-Forwarded-Host", "app.example.com", "X-Forwarded-Proto", "https"}, more...)
}

// ParseItem parses a structured-field item `"name";r=N;t=T` (and q/w for
// the policy).
func ParseItem(t *testing.T, s string) (string, map[string]int64) {
	t.Helper()
	m := regexp.MustCompile(`^"([^"]+)"((?:;[a-z]+=\d+)+)$`).FindStringSubmatch(s)
	require.NotNil(t, m, "not a structured-field item: %q", s)
	params := map[string]int64{}
	for _, p := range strings.Split(m[2][1:], ";") {
		kv := strings.SplitN(p, "=", 2)
		v, err := strconv.ParseInt(kv[1], 10, 64)
		require.NoError(t, err)
		params[kv[0]] = v
	}
	return m[1], params
}

// HeaderInt returns the header name, which must appear once, as an
// integer.
func HeaderInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	require.Len(t, h.Values(name), 1, "header %s", name)
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	require.NoError(t, err, "header %s=%q", name, h.Get(name))
	return v
}
