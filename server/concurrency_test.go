package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const concYAML = `
rules:
  - {name: uploads, kind: concurrency, limit: 2, lease_ttl: 30s}
  - {name: r, limit: 100, window: 1m}
`

// inFlight reads GET /v1/keys of a concurrency rule's key.
func (ta *testApp) inFlight(rule, key string) float64 {
	ta.T.Helper()
	r := ta.Get("/v1/keys/" + rule + "/" + key)
	require.Equal(ta.T, http.StatusOK, r.Status, "%s", r.Body)
	return r.JSON(ta.T)["in_flight"].(float64)
}

// TestConcurrencyAPI: /v1/acquire hands out leases up to the limit and
// answers 429 with Retry-After beyond; /v1/release gives one back once; a
// lease not released comes back at lease_ttl.
func TestConcurrencyAPI(t *testing.T) {
	ta := startApp(t, concYAML)
	acquire := func(key string) resp { return ta.Post("/v1/acquire", `{"rule":"uploads","key":"`+key+`"}`) }
	var leases []string
	for i := range 2 {
		r := acquire("k")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		m := r.JSON(t)
		assert.Equal(t, true, m["allowed"])
		assert.EqualValues(t, 1-i, m["remaining"])
		assert.EqualValues(t, 30000, m["expires_ms"])
		lease := m["lease"].(string)
		assert.Len(t, lease, 32)
		leases = append(leases, lease)
		assert.Equal(t, `"uploads";q=2`, r.Header.Get("RateLimit-Policy"), "no window for requests in flight")
	}
	assert.NotEqual(t, leases[0], leases[1])
	assert.EqualValues(t, 2, ta.inFlight("uploads", "k"))

	r := acquire("k")
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	m := r.JSON(t)
	assert.Equal(t, false, m["allowed"])
	assert.EqualValues(t, 1000, m["retry_after_ms"])
	assert.Nil(t, m["lease"])

	rel := func(body string) resp { return ta.Post("/v1/release", body) }
	r = rel(`{"lease":"` + leases[0] + `"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, map[string]any{"released": true}, r.JSON(t))
	assert.Equal(t, http.StatusNotFound, rel(`{"lease":"`+leases[0]+`"}`).Status, "released once")
	assert.Equal(t, http.StatusNotFound, rel(`{"lease":"`+strings.Repeat("0", 32)+`"}`).Status, "never acquired")
	for _, bad := range []string{`{"lease":"abc"}`, `{}`, `{"lease":7}`, `not json`, `{"lease":"` + leases[1] + `","x":1}`,
		`{"lease":"` + strings.Repeat("g", 32) + `"}`} {
		assert.Equal(t, http.StatusBadRequest, rel(bad).Status, "%s", bad)
	}
	assert.EqualValues(t, 1, ta.inFlight("uploads", "k"), "bad releases gave nothing back")
	require.Equal(t, http.StatusOK, acquire("k").Status, "the released slot is free again")

	// A client that crashed holding its leases: they come back at lease_ttl.
	require.Equal(t, http.StatusTooManyRequests, acquire("k").Status)
	ta.Clk.Advance(30 * time.Second)
	require.Equal(t, http.StatusOK, acquire("k").Status, "the crashed holder's slots came back")
	assert.Equal(t, http.StatusNotFound, rel(`{"lease":"`+leases[1]+`"}`).Status, "an expired lease is gone")

	// The wrong endpoint for each kind.
	r = ta.Post("/v1/check", `{"rule":"uploads","key":"k"}`)
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, string(r.Body), "POST /v1/acquire")
	r = ta.Post("/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"uploads","key":"k"}]}`)
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, r.JSON(t)["error"], `checks[1]: rule "uploads" is kind: concurrency`)
	r = ta.Post("/v1/acquire", `{"rule":"r","key":"k"}`)
	assert.Equal(t, http.StatusBadRequest, r.Status)
	assert.Contains(t, string(r.Body), "not kind: concurrency")
	assert.Equal(t, http.StatusNotFound, ta.Post("/v1/acquire", `{"rule":"nope","key":"k"}`).Status)
	assert.Equal(t, http.StatusBadRequest, ta.Post("/v1/acquire", `{"rule":"uploads","key":""}`).Status)
	assert.Equal(t, http.StatusMethodNotAllowed, ta.Get("/v1/acquire").Status)
	assert.Equal(t, http.StatusMethodNotAllowed, ta.Get("/v1/release").Status)

	mfs := ta.Scrape()
	v, ok := servertest.MetricValue(mfs, "geolimit_concurrency_in_flight", "rule", "uploads")
	require.True(t, ok)
	assert.EqualValues(t, 1, v)
	for outcome, want := range map[string]float64{"acquired": 4, "denied": 2, "released": 1, "expired": 2} {
		v, ok := servertest.MetricValue(mfs, "geolimit_concurrency_leases_total", "outcome", outcome)
		require.True(t, ok, outcome)
		assert.Equal(t, want, v, outcome)
	}
	assert.EqualValues(t, 4, ta.Decisions("uploads", "allowed"))
	assert.EqualValues(t, 2, ta.Decisions("uploads", "denied"))
}

// TestConcurrencyAPIShadow: a shadow rule with no slot free admits,
// says so, and hands out no lease; /v1/status shows the rule's kind.
func TestConcurrencyAPIShadow(t *testing.T) {
	ta := startApp(t, "rules:\n  - {name: watch, kind: concurrency, limit: 1, mode: shadow, scope: node}\n")
	first := ta.Post("/v1/acquire", `{"rule":"watch","key":"k"}`).JSON(t)
	assert.NotEmpty(t, first["lease"])
	assert.Nil(t, first["shadow_denied"])
	r := ta.Post("/v1/acquire", `{"rule":"watch","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status, "a shadow rule never denies")
	m := r.JSON(t)
	assert.Equal(t, true, m["shadow_denied"])
	assert.Nil(t, m["lease"], "no slot was free: none is held")
	assert.EqualValues(t, 1, ta.inFlight("watch", "k"))

	var st struct {
		Rules []map[string]any `json:"rules"`
	}
	require.NoError(t, json.Unmarshal(ta.Get("/v1/status").Body, &st))
	require.Len(t, st.Rules, 1)
	assert.Equal(t, "concurrency", st.Rules[0]["kind"])
	assert.Equal(t, "1m0s", st.Rules[0]["lease_ttl"])
}

// TestConcurrencyAPIToken: the lease endpoints are behind the API token.
func TestConcurrencyAPIToken(t *testing.T) {
	tokFile := servertest.WriteTokens(t, t.TempDir(), servertest.Token1+"\n")
	ta := startApp(t, concYAML+"api: {token_file: "+tokFile+"}\n")
	assert.Equal(t, http.StatusUnauthorized, ta.Post("/v1/acquire", `{"rule":"uploads","key":"k"}`).Status)
	assert.Equal(t, http.StatusUnauthorized, ta.Post("/v1/release", `{"lease":"`+strings.Repeat("0", 32)+`"}`).Status)
	ta.Token = servertest.Token1
	assert.Equal(t, http.StatusOK, ta.Post("/v1/acquire", `{"rule":"uploads","key":"k"}`).Status)
	assert.EqualValues(t, 1, ta.inFlight("uploads", "k"), "the refused acquire held nothing")
}

// holdingUpstream is a real upstream whose handler holds every request until
// told to let one go.
type holdingUpstream struct {
	*httptest.Server
	inFlight atomic.Int64
	// peak is the most requests ever in flight at once.
	peak    atomic.Int64
	release chan struct{}
}

func newHoldingUpstream(t *testing.T) *holdingUpstream {
	u := &holdingUpstream{release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/up/") {
			return // answered at once
		}
		n := u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
		}
		if r.URL.Path == "/up/fail" {
			panic(http.ErrAbortHandler) // the upstream drops the connection
		}
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("done"))
	}))
	t.Cleanup(u.Close)
	return u
}

// TestConcurrencyProxy: proxy mode takes a slot before the upstream and
// gives it back when the response ends, also when the client goes away or
// the upstream fails; a request in flight holds its slot past lease_ttl.
func TestConcurrencyProxy(t *testing.T) {
	up := newHoldingUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: uploads, kind: concurrency, limit: 2, lease_ttl: 5s, match: {path_prefix: /up}, key: ip}
  - {name: per-ip, limit: 1000, window: 1m}
`))
	proxyURL := "http://" + ta.App.ProxyAddr().String()
	type answer struct {
		status int
		err    error
	}
	send := func(ctx context.Context, path string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL+path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			res.Body.Close()
			ch <- answer{status: res.StatusCode}
		}()
		return ch
	}
	waitUpstream := func(n int64) {
		require.Eventually(t, func() bool { return up.inFlight.Load() == n }, 10*time.Second, 5*time.Millisecond,
			"%d requests at the upstream", n)
	}
	first, second := send(context.Background(), "/up/1"), send(context.Background(), "/up/2")
	waitUpstream(2)
	assert.EqualValues(t, 2, ta.inFlight("uploads", "127.0.0.1"))

	r := ta.Proxy("GET", "/up/3")
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Equal(t, `"uploads";q=2`, r.Header.Get("RateLimit-Policy"))
	assert.Equal(t, http.StatusOK, ta.Proxy("GET", "/other").Status, "another path is not limited by the rule")

	// Requests in flight hold their slots past lease_ttl: the node is alive.
	ta.Clk.Advance(time.Minute)
	ta.App.Node().Tick(ta.Clk.Now())
	assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("GET", "/up/3").Status)

	// The response ends: the slot comes back. (Either request may be the
	// one let go.)
	up.release <- struct{}{}
	var a answer
	select {
	case a = <-first:
	case a = <-second:
		second = first
	}
	assert.Equal(t, http.StatusOK, a.status)
	require.Eventually(t, func() bool { return ta.inFlight("uploads", "127.0.0.1") == 1 }, 10*time.Second, 5*time.Millisecond)

	// The client goes away: the slot comes back.
	ctx, cancel := context.WithCancel(context.Background())
	gone := send(ctx, "/up/4")
	waitUpstream(2)
	cancel()
	assert.Error(t, (<-gone).err)
	require.Eventually(t, func() bool { return ta.inFlight("uploads", "127.0.0.1") == 1 }, 10*time.Second, 5*time.Millisecond)

	// The upstream fails: 502, and the slot comes back.
	r = ta.Proxy("GET", "/up/fail")
	assert.Equal(t, http.StatusBadGateway, r.Status)
	assert.EqualValues(t, 1, ta.inFlight("uploads", "127.0.0.1"))

	up.release <- struct{}{}
	assert.Equal(t, http.StatusOK, (<-second).status)
	require.Eventually(t, func() bool { return ta.inFlight("uploads", "127.0.0.1") == 0 }, 10*time.Second, 5*time.Millisecond)

	// Many at once: never more than the limit at the upstream.
	var wg sync.WaitGroup
	var ok, denied atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case up.release <- struct{}{}:
			}
		}
	}()
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := <-send(context.Background(), fmt.Sprintf("/up/many-%d", i))
			switch a.status {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusTooManyRequests:
				denied.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	assert.EqualValues(t, 20, ok.Load()+denied.Load())
	assert.EqualValues(t, 2, up.peak.Load(), "never more than the limit at the upstream")
	require.Eventually(t, func() bool { return ta.inFlight("uploads", "127.0.0.1") == 0 }, 10*time.Second, 5*time.Millisecond,
		"every slot came back")
	v, found := servertest.MetricValue(ta.Scrape(), "geolimit_concurrency_leases_total", "outcome", "expired")
	require.True(t, found)
	assert.Zero(t, v, "proxied requests never expire")
}

// TestConcurrencyForwardAuth: forward auth answers before the request is
// done, so it cannot hold a slot: concurrency rules do not apply there.
func TestConcurrencyForwardAuth(t *testing.T) {
	ta := startApp(t, `
listen: {api: "127.0.0.1:0", forward_auth: "127.0.0.1:0"}
rules:
  - {name: uploads, kind: concurrency, limit: 1}
`)
	for range 3 {
		r := ta.Do(http.MethodGet, "http://"+ta.App.ForwardAuthAddr().String()+"/", "")
		assert.Equal(t, http.StatusOK, r.Status)
	}
	assert.EqualValues(t, 0, ta.inFlight("uploads", "127.0.0.1"))
}

// TestConcurrencyLeaseTableFull: one client holding leases on many keys,
// never released, with a long lease_ttl, fills this node's lease table
// (limits.max_keys / 4, here 100). The table stays bounded, and a request
// that finds no room is answered 503 with an error that says so (not a
// 429 of its key, whose slots are free); the held leases' keys are
// still denied as before, and a released lease gives its place back.
func TestConcurrencyLeaseTableFull(t *testing.T) {
	ta := startApp(t, `
rules:
  - {name: uploads, kind: concurrency, limit: 1, lease_ttl: 1h}
limits: {max_keys: 400}
`)
	var leases []string
	for i := range 150 {
		r := ta.Post("/v1/acquire", fmt.Sprintf(`{"rule":"uploads","key":"hog-%d"}`, i))
		if r.Status != http.StatusOK {
			break
		}
		leases = append(leases, r.JSON(t)["lease"].(string))
	}
	require.Len(t, leases, 100, "the table holds limits.max_keys / 4 leases")
	r := ta.Post("/v1/acquire", `{"rule":"uploads","key":"victim"}`)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	body := r.JSON(t)
	assert.Equal(t, false, body["allowed"])
	assert.Equal(t, true, body["lease_table_full"])
	assert.Contains(t, body["error"], "lease table full: 100 leases held on this node (limits.max_keys / 4 = 100)")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	r = ta.Post("/v1/acquire", `{"rule":"uploads","key":"hog-0"}`)
	assert.Equal(t, http.StatusTooManyRequests, r.Status, "a held key is denied as before: %s", r.Body)
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_concurrency_leases")
	require.True(t, ok)
	assert.EqualValues(t, 100, v)

	r = ta.Post("/v1/release", `{"lease":"`+leases[0]+`"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = ta.Post("/v1/acquire", `{"rule":"uploads","key":"victim"}`)
	assert.Equal(t, http.StatusOK, r.Status, "a released lease's place: %s", r.Body)
}

// TestConcurrencyLeaseTableFullProxy: the lease table full of one client's
// leases (as in TestConcurrencyLeaseTableFull), a proxied request of a
// fresh key of that rule is answered as the API answers it: 503 naming the
// cap, not a 429 of its key, whose slots are free. The proxy and the
// middleware answer through the one pipeline (frontend.Env.Decide).
func TestConcurrencyLeaseTableFullProxy(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: uploads, kind: concurrency, limit: 1, lease_ttl: 1h, match: {path_prefix: /up}, key: "header:X-User"}
limits: {max_keys: 400}
`))
	for i := range 100 {
		r := ta.Post("/v1/acquire", fmt.Sprintf(`{"rule":"uploads","key":"hog-%d"}`, i))
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	r := ta.Proxy("GET", "/up/1", "X-User", "victim")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	body := r.JSON(t)
	assert.Equal(t, true, body["lease_table_full"])
	assert.Equal(t, "uploads", body["rule"])
	assert.Contains(t, body["error"], "lease table full: 100 leases held on this node (limits.max_keys / 4 = 100)")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, http.StatusOK, ta.Proxy("GET", "/other", "X-User", "victim").Status, "no concurrency rule applies")
}
