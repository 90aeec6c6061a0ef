package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/geolimit/geolimit/server/spoa"
)

// frontendsYAML opens every front end on one node: the API, the proxy,
// forward auth, the rate limit service and the HAProxy agent (the
// middleware wraps a handler of the test's). The tests' client is the trusted proxy that sets X-Plan.
func frontendsYAML(upstream string) string {
	return fmt.Sprintf(`
listen: {api: "127.0.0.1:0", proxy: "127.0.0.1:0", forward_auth: "127.0.0.1:0", grpc: "127.0.0.1:0", spoa: "127.0.0.1:0"}
proxy: {upstream: %q, trusted_proxies: [127.0.0.1/32]}
rules:
  - name: user
    key: header:X-User
    tier: header:X-Plan
    limit: 3
    window: 1m
    tiers: {pro: 5}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [user, plan], tier: plan, rule: user}
        - {entries: [user, plan, idem], tier: plan, idempotency_key: idem, rule: user}
idempotency: {header: Idempotency-Key}
`, upstream)
}

// answer is what a front end says of one request: the decision and the
// headers a client sees.
type answer struct {
	allowed, repeat                          bool
	policy, rateLimit, limit, remaining, ret string
}

func httpAnswer(r resp) answer {
	return answer{
		allowed: r.Status == http.StatusOK, policy: r.Header.Get("RateLimit-Policy"), rateLimit: r.Header.Get("RateLimit"),
		limit: r.Header.Get("X-RateLimit-Limit"), remaining: r.Header.Get("X-RateLimit-Remaining"), ret: r.Header.Get("Retry-After"),
		repeat: r.Header.Get("Geolimit-Idempotent-Repeat") == "true",
	}
}

// withIdem adds the idempotency header to hdr when idem is not empty.
func withIdem(idem string, hdr ...string) []string {
	if idem == "" {
		return hdr
	}
	return append(hdr, "Idempotency-Key", idem)
}

// TestFrontEndsDecideAlike: the same request through the API, the proxy,
// forward auth, the rate limit service, the HAProxy agent and the
// middleware gets the same decision, the same headers and the same counts:
// every front end classifies into the same checks and the node's one
// pipeline decides.
func TestFrontEndsDecideAlike(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, frontendsYAML(up.URL))
	mw := httptest.NewServer(ta.App.middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(mw.Close)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	nc, err := net.Dial("tcp", ta.App.SPOAAddr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	hap, _, err := spoa.NewClient(nc)
	require.NoError(t, err)

	// ask sends one request for user, with the idempotency key idem when
	// not empty.
	fronts := []struct {
		name string
		ask  func(user, idem string) answer
	}{
		{"api", func(user, idem string) answer {
			body := `{"rule":"user","key":"` + user + `","tier":"pro"`
			if idem != "" {
				body += `,"idempotency_key":"` + idem + `"`
			}
			return httpAnswer(ta.Post("/v1/check", body+"}"))
		}},
		{"proxy", func(user, idem string) answer {
			return httpAnswer(ta.Proxy("GET", "/x", withIdem(idem, "X-User", user, "X-Plan", "pro")...))
		}},
		{"forward auth", func(user, idem string) answer {
			return httpAnswer(ta.ForwardAuth("GET", "/", servertest.FwdHeaders("GET", "/x", "198.51.100.9", withIdem(idem, "X-User", user, "X-Plan", "pro")...)...))
		}},
		{"middleware", func(user, idem string) answer {
			return httpAnswer(ta.Do("GET", mw.URL+"/x", "", withIdem(idem, "X-User", user, "X-Plan", "pro")...))
		}},
		{"rls", func(user, idem string) answer {
			d := servertest.Desc("user", user, "plan", "pro")
			if idem != "" {
				d = servertest.Desc("user", user, "plan", "pro", "idem", idem)
			}
			res, err := c.ShouldRateLimit(context.Background(), servertest.RLSReq("edge", d))
			require.NoError(t, err)
			a := answer{allowed: res.GetOverallCode() == rlsv3.RateLimitResponse_OK}
			for _, h := range res.GetResponseHeadersToAdd() {
				switch http.CanonicalHeaderKey(h.GetKey()) {
				case "Ratelimit-Policy":
					a.policy = h.GetValue()
				case "Ratelimit":
					a.rateLimit = h.GetValue()
				case "X-Ratelimit-Limit":
					a.limit = h.GetValue()
				case "X-Ratelimit-Remaining":
					a.remaining = h.GetValue()
				case "Retry-After":
					a.ret = h.GetValue()
				case "Geolimit-Idempotent-Repeat":
					a.repeat = h.GetValue() == "true"
				}
			}
			return a
		}},
		{"spoa", func(user, idem string) answer {
			hdrs := [][2]string{{"x-user", user}, {"x-plan", "pro"}}
			if idem != "" {
				hdrs = append(hdrs, [2]string{"idempotency-key", idem})
			}
			v, err := hap.Check(spoa.Message{Method: "GET", Path: "/x", Host: "example.com", Src: netip.MustParseAddr("198.51.100.9"), Headers: hdrs})
			require.NoError(t, err)
			s := func(name string) string { x, _ := v[name].(string); return x }
			return answer{allowed: v["allowed"] == int64(1), policy: s("ratelimit_policy"), rateLimit: s("ratelimit"),
				limit: s("x_ratelimit_limit"), remaining: s("x_ratelimit_remaining"), ret: s("retry_after"), repeat: v["repeat"] == int64(1)}
		}},
	}
	var want []answer
	for _, f := range fronts {
		user := "u-" + f.name
		var got []answer
		for range 7 {
			got = append(got, f.ask(user, ""))
		}
		if want == nil {
			want = got
			admitted := 0
			for _, a := range got {
				if a.allowed {
					admitted++
				}
			}
			require.Equal(t, 5, admitted, "the pro tier's limit")
			require.Equal(t, "2", got[2].remaining)
			require.NotEmpty(t, got[6].ret)
		}
		assert.Equal(t, want, got, "%s answers as the API does", f.name)
		assert.EqualValues(t, 5, ta.KeyTotal("user", user), "%s counts as the API does", f.name)
	}
	// A request repeated under its idempotency key: decided once, then
	// answered as a repeat, alike everywhere.
	var wantRepeat []answer
	for _, f := range fronts {
		user := "r-" + f.name
		got := []answer{f.ask(user, "op-1"), f.ask(user, "op-1")}
		require.True(t, got[1].repeat, "%s says it is a repeat", f.name)
		if wantRepeat == nil {
			wantRepeat = got
		}
		assert.Equal(t, wantRepeat, got, "%s answers a repeat as the API does", f.name)
		assert.EqualValues(t, 1, ta.KeyTotal("user", user), "%s counts a repeat as the API does", f.name)
	}
	assert.EqualValues(t, 7*len(fronts), ta.Decisions("user", "allowed"), "a repeat counts as the decision it repeats")
	assert.EqualValues(t, 2*len(fronts), ta.Decisions("user", "denied"))
}

// TestCompositeKeysNeverCollide: two different lists of key parts are two
// keys, through the proxy and through Envoy descriptors.
func TestCompositeKeysNeverCollide(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, fmt.Sprintf(`
listen: {api: "127.0.0.1:0", proxy: "127.0.0.1:0", grpc: "127.0.0.1:0"}
proxy: {upstream: %q}
rules:
  - {name: pair, key: [header:X-A, header:X-B], limit: 2, window: 1m}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [a, b], rule: pair}
`, up.URL))
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	for _, parts := range [][2]string{{`acme|bob`, `x`}, {`acme`, `bob|x`}, {`acme\`, `|x`}, {`acme\|`, `x`}} {
		for range 2 {
			require.Equal(t, http.StatusOK, ta.Proxy("GET", "/", "X-A", parts[0], "X-B", parts[1]).Status, "%q", parts)
		}
		assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("GET", "/", "X-A", parts[0], "X-B", parts[1]).Status, "%q", parts)
	}
	// The same parts through Envoy: the same keys, already spent.
	res := servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("a", "acme", "b", "bob|x")))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("a", "acme", "b", "bob")))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	assert.EqualValues(t, 2, ta.KeyTotal("pair", `acme\|bob|x`))
	assert.EqualValues(t, 2, ta.KeyTotal("pair", `acme|bob\|x`))
	assert.EqualValues(t, 1, ta.KeyTotal("pair", `acme|bob`))
}
