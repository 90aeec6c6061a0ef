package rls_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsYAML is a config with the rate limit service on a free port.
const rlsYAML = `
listen: {api: "127.0.0.1:0", grpc: "127.0.0.1:0"}
rules:
  - {name: per-ip, limit: 3, window: 1m}
  - {name: per-user, limit: 100, window: 10s}
  - {name: per-path, limit: 5, window: 1h}
  - {name: heavy, limit: 10, window: 1m, cost: 2}
  - {name: tight, limit: 1, window: 1m}
  - {name: watch, limit: 1, window: 1m, mode: shadow}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [remote_address], rule: per-ip}
        - {entries: [generic_key, user_id], rule: per-path}
        - {entries: [generic_key=api, user_id], rule: per-user}
        - {entries: [heavy], rule: heavy}
        - {entries: [tight], rule: tight}
        - {entries: [watch], rule: watch}
`

func (ta *testApp) rlsRequests(result string) float64 {
	ta.T.Helper()
	v, _ := servertest.MetricValue(ta.Scrape(), "geolimit_rls_requests_total", "result", result)
	return v
}

// TestRLSStatuses: one descriptor per request up to the limit and past it:
// codes, current_limit, limit_remaining, duration_until_reset and the
// RateLimit headers, the key shared with the HTTP API, the metrics.
func TestRLSStatuses(t *testing.T) {
	ta := startApp(t, rlsYAML)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	req := servertest.RLSReq("edge", servertest.Desc("remote_address", "203.0.113.7"))
	for i := 1; i <= 3; i++ {
		res := servertest.ShouldRL(t, c, req)
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode(), "request %d", i)
		st := res.GetStatuses()[0]
		assert.Equal(t, rlsv3.RateLimitResponse_OK, st.GetCode())
		assert.Equal(t, "per-ip", st.GetCurrentLimit().GetName())
		assert.Equal(t, uint32(3), st.GetCurrentLimit().GetRequestsPerUnit())
		assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, st.GetCurrentLimit().GetUnit())
		assert.Equal(t, uint32(3-i), st.GetLimitRemaining())
		assert.Positive(t, st.GetDurationUntilReset().AsDuration())
		h := servertest.HeaderMap(res.GetResponseHeadersToAdd())
		assert.Equal(t, `"per-ip";q=3;w=60`, h["ratelimit-policy"])
		assert.Equal(t, "3", h["x-ratelimit-limit"])
		assert.Equal(t, string(rune('0'+3-i)), h["x-ratelimit-remaining"])
		assert.True(t, strings.HasPrefix(h["ratelimit"], `"per-ip";r=`+string(rune('0'+3-i))+";t="), h["ratelimit"])
		assert.NotContains(t, h, "retry-after")
	}
	res := servertest.ShouldRL(t, c, req)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	st := res.GetStatuses()[0]
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, st.GetCode())
	assert.Equal(t, uint32(0), st.GetLimitRemaining())
	wait := st.GetDurationUntilReset().AsDuration()
	assert.Positive(t, wait)
	h := servertest.HeaderMap(res.GetResponseHeadersToAdd())
	retry := h["retry-after"]
	require.NotEmpty(t, retry)
	assert.Equal(t, retry, h["x-ratelimit-reset"])
	assert.Equal(t, `"per-ip";r=0;t=`+retry, h["ratelimit"])

	// The same headers as the HTTP API's for the same key, which it shares.
	r := ta.Post("/v1/check", `{"rule":"per-ip","key":"203.0.113.7"}`)
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, r.Header.Get("Retry-After"), retry)
	assert.Equal(t, r.Header.Get("Ratelimit"), h["ratelimit"])
	assert.Equal(t, uint64(3), ta.KeyTotal("per-ip", "203.0.113.7"))

	assert.Equal(t, 3.0, ta.Decisions("per-ip", "allowed"))
	assert.Equal(t, 2.0, ta.Decisions("per-ip", "denied"), "one by the service, one by the API")
	assert.Equal(t, 3.0, ta.rlsRequests("ok"))
	assert.Equal(t, 1.0, ta.rlsRequests("over_limit"))
	n, ok := servertest.MetricValue(ta.Scrape(), "geolimit_decision_duration_seconds", "endpoint", "rls")
	require.True(t, ok)
	assert.Equal(t, 4.0, n, "one latency observation per request")

	// Gone a window later: the manual clock moves the sliding window.
	ta.Clk.Advance(2 * time.Minute)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, servertest.ShouldRL(t, c, req).GetOverallCode())
}

// TestRLSCost: hits_addend at request and descriptor level, the rule's cost
// when none is named, a descriptor-level 0 that only checks, and a cost no
// window can hold.
func TestRLSCost(t *testing.T) {
	ta := startApp(t, rlsYAML)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())

	req := servertest.RLSReq("edge", servertest.Desc("heavy", "a"))
	res := servertest.ShouldRL(t, c, req)
	assert.Equal(t, uint32(8), res.GetStatuses()[0].GetLimitRemaining(), "no hits_addend: the rule's cost, 2")
	assert.Equal(t, uint64(2), ta.KeyTotal("heavy", "a"))

	req.HitsAddend = 3
	res = servertest.ShouldRL(t, c, req)
	assert.Equal(t, uint32(5), res.GetStatuses()[0].GetLimitRemaining(), "request-level hits_addend")
	assert.Equal(t, uint64(5), ta.KeyTotal("heavy", "a"))

	d := servertest.Desc("heavy", "a")
	d.HitsAddend = wrapperspb.UInt64(4)
	req.Descriptors = []*rlcommonv3.RateLimitDescriptor{d}
	res = servertest.ShouldRL(t, c, req)
	assert.Equal(t, uint32(1), res.GetStatuses()[0].GetLimitRemaining(), "descriptor-level hits_addend overrides the request's")
	assert.Equal(t, uint64(9), ta.KeyTotal("heavy", "a"))

	d.HitsAddend = wrapperspb.UInt64(0)
	res = servertest.ShouldRL(t, c, req)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode(), "a check of the rule's cost 2 does not fit in 1")
	assert.Equal(t, uint32(1), res.GetStatuses()[0].GetLimitRemaining())
	assert.Equal(t, uint64(9), ta.KeyTotal("heavy", "a"), "a descriptor-level hits_addend of 0 counts nothing")

	d = servertest.Desc("heavy", "b")
	d.HitsAddend = wrapperspb.UInt64(0)
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", d))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	assert.Equal(t, uint32(10), res.GetStatuses()[0].GetLimitRemaining(), "a check reports the remaining as it stands")
	assert.Equal(t, uint64(0), ta.KeyTotal("heavy", "b"))

	req = servertest.RLSReq("edge", servertest.Desc("heavy", "c"))
	req.HitsAddend = 11
	res = servertest.ShouldRL(t, c, req)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode(), "a cost over the limit never fits: over limit, not an error")
	st := res.GetStatuses()[0]
	assert.Equal(t, uint32(10), st.GetLimitRemaining())
	assert.GreaterOrEqual(t, st.GetDurationUntilReset().AsDuration(), time.Minute)
	assert.Equal(t, uint64(0), ta.KeyTotal("heavy", "c"))
}

// TestRLSAnd: several descriptors are ANDed and a denied request spends
// nothing, on any descriptor; descriptors sharing a rule and key are checked
// with their summed cost; shadow rules never deny and count only on
// admitted requests.
func TestRLSAnd(t *testing.T) {
	ta := startApp(t, rlsYAML)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	both := servertest.RLSReq("edge", servertest.Desc("remote_address", "198.51.100.1"), servertest.Desc("tight", "k"))
	res := servertest.ShouldRL(t, c, both)
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	assert.Equal(t, uint32(2), res.GetStatuses()[0].GetLimitRemaining())
	assert.Equal(t, uint32(0), res.GetStatuses()[1].GetLimitRemaining())
	assert.Equal(t, "tight", res.GetStatuses()[1].GetCurrentLimit().GetName())
	assert.Equal(t, "0", servertest.HeaderMap(res.GetResponseHeadersToAdd())["x-ratelimit-remaining"], "headers: the rule with the least remaining")

	res = servertest.ShouldRL(t, c, both)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[0].GetCode())
	assert.Equal(t, uint32(2), res.GetStatuses()[0].GetLimitRemaining(), "the admitting descriptor reports its remaining as it stands")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetStatuses()[1].GetCode())
	assert.Contains(t, servertest.HeaderMap(res.GetResponseHeadersToAdd())["ratelimit"], `"tight";r=0`)
	assert.Equal(t, uint64(1), ta.KeyTotal("per-ip", "198.51.100.1"), "the denied request spent nothing on per-ip")
	assert.Equal(t, 1.0, ta.Decisions("per-ip", "allowed"))
	assert.Equal(t, 0.0, ta.Decisions("per-ip", "denied"))
	assert.Equal(t, 1.0, ta.Decisions("tight", "denied"))

	// Two descriptors on the same rule and key: 2 of per-ip's 2 remaining fit,
	// 3 do not, and then nothing is spent.
	ip := servertest.Desc("remote_address", "198.51.100.1")
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", ip, ip, ip))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	assert.Equal(t, uint64(1), ta.KeyTotal("per-ip", "198.51.100.1"))
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", ip, ip))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	assert.Equal(t, uint64(3), ta.KeyTotal("per-ip", "198.51.100.1"))

	// Shadow: counted when the request is admitted, never denying; not
	// counted when an enforce descriptor denies.
	watch := servertest.Desc("watch", "w")
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", watch, servertest.Desc("remote_address", "192.0.2.9")))
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	assert.Equal(t, uint64(1), ta.KeyTotal("watch", "w"))
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", watch))
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode(), "a shadow rule never denies")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[0].GetCode())
	assert.Equal(t, "watch", res.GetStatuses()[0].GetCurrentLimit().GetName())
	assert.Empty(t, res.GetResponseHeadersToAdd(), "shadow rules never show in headers")
	assert.Equal(t, 1.0, ta.Decisions("watch", "shadow_denied"))
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("watch", "v"), servertest.Desc("tight", "k")))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	assert.Equal(t, uint64(0), ta.KeyTotal("watch", "v"), "a denied request does not count its shadow descriptors")
	assert.Equal(t, uint32(1), res.GetStatuses()[0].GetLimitRemaining())
}

// TestRLSMatching: unknown domains and descriptors matching nothing are not
// limited (OK, no current_limit); a fixed value beats any value; an empty
// value matches nothing; composite keys join the values with '|'; long keys
// are hashed.
func TestRLSMatching(t *testing.T) {
	ta := startApp(t, rlsYAML)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())

	res := servertest.ShouldRL(t, c, servertest.RLSReq("nowhere", servertest.Desc("remote_address", "203.0.113.7"), servertest.Desc("x", "y")))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	for _, st := range res.GetStatuses() {
		assert.Equal(t, rlsv3.RateLimitResponse_OK, st.GetCode())
		assert.Nil(t, st.GetCurrentLimit())
		assert.Nil(t, st.GetDurationUntilReset())
	}
	assert.Empty(t, res.GetResponseHeadersToAdd())
	assert.Equal(t, 1.0, ta.rlsRequests("unknown_domain"))
	assert.Equal(t, uint64(0), ta.KeyTotal("per-ip", "203.0.113.7"))

	unmatched := []*rlcommonv3.RateLimitDescriptor{
		servertest.Desc("user_id", "u1"),                           // no shape with this key alone
		servertest.Desc("remote_address", "203.0.113.7", "x", "y"), // more entries than the shape
		servertest.Desc("user_id", "u1", "generic_key", "api"),     // the keys in another order
		servertest.Desc("remote_address", ""),                      // an empty value
		servertest.Desc("generic_key", "api", "user_id", ""),       // an empty value in a composite
		servertest.Desc("Remote_Address", "203.0.113.7"),           // keys are case-sensitive
	}
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", unmatched...))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	for i, st := range res.GetStatuses() {
		assert.Nil(t, st.GetCurrentLimit(), "descriptor %d", i)
		assert.Equal(t, rlsv3.RateLimitResponse_OK, st.GetCode())
	}
	v, _ := servertest.MetricValue(ta.Scrape(), "geolimit_rls_unmatched_descriptors_total")
	assert.Equal(t, float64(len(unmatched)), v)

	// generic_key=api is more specific than generic_key alone, wherever it
	// stands in the config.
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("generic_key", "api", "user_id", "u1"), servertest.Desc("generic_key", "web", "user_id", "u1")))
	assert.Equal(t, "per-user", res.GetStatuses()[0].GetCurrentLimit().GetName())
	assert.Equal(t, "per-path", res.GetStatuses()[1].GetCurrentLimit().GetName())
	assert.Equal(t, uint64(1), ta.KeyTotal("per-user", "api|u1"), "the values joined by '|' form the key")
	assert.Equal(t, uint64(1), ta.KeyTotal("per-path", "web|u1"))
	// 100 per 10s reads 600 per MINUTE.
	assert.Equal(t, uint32(600), res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, res.GetStatuses()[0].GetCurrentLimit().GetUnit())

	long := strings.Repeat("x", 300)
	res = servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("remote_address", long)))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode(), "a long value is hashed, not refused")
	assert.Equal(t, uint64(1), ta.KeyTotal("per-ip", long), "looked up by the value, as the API names it")
}

// TestRLSBadInput: malformed requests are InvalidArgument naming the field,
// and nothing of them is counted.
func TestRLSBadInput(t *testing.T) {
	ta := startApp(t, rlsYAML+"limits: {max_batch: 3}\n")
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	ok := servertest.Desc("remote_address", "203.0.113.7")
	neg := servertest.Desc("remote_address", "203.0.113.7")
	neg.IsNegativeHits = true
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", servertest.RLSReq("", ok), "domain: must not be empty"},
		{"no descriptors", servertest.RLSReq("edge"), "descriptors: at least one required"},
		{"no entries", servertest.RLSReq("edge", ok, &rlcommonv3.RateLimitDescriptor{}), "descriptors[1].entries: at least one required"},
		{"empty key", servertest.RLSReq("edge", ok, servertest.Desc("remote_address", "a", "", "b")), "descriptors[1].entries[1].key: must not be empty"},
		{"too many", servertest.RLSReq("edge", ok, ok, ok, ok), "descriptors: 4 in one request, more than limits.max_batch 3"},
		{"negative hits", servertest.RLSReq("edge", ok, neg), "descriptors[1].is_negative_hits: not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(context.Background(), tt.req)
			require.Error(t, err)
			st := grpcstatus.Convert(err)
			assert.Equal(t, codes.InvalidArgument, st.Code())
			assert.Contains(t, st.Message(), tt.want)
		})
	}
	assert.Equal(t, uint64(0), ta.KeyTotal("per-ip", "203.0.113.7"), "nothing spent")
	assert.Equal(t, float64(len(tests)), ta.rlsRequests("invalid_argument"))
	assert.Equal(t, 0.0, ta.Decisions("per-ip", "allowed"))
}

// TestRLSConcurrent: requests from many goroutines on one connection admit
// exactly the limit (the clock stands still), and responses that share a
// rule's current_limit are encoded concurrently (run with -race).
func TestRLSConcurrent(t *testing.T) {
	ta := startApp(t, rlsYAML)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	req := servertest.RLSReq("edge", servertest.Desc("generic_key", "api", "user_id", "u1"), servertest.Desc("watch", "w"))
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				res, err := c.ShouldRateLimit(context.Background(), req)
				if !assert.NoError(t, err) {
					return
				}
				if res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(100), ok.Load(), "per-user admits exactly its limit of 100")
	assert.Equal(t, uint64(100), ta.KeyTotal("per-user", "api|u1"))
}

// TestRLSMessageSize: a request message over limits.max_body_bytes is
// refused by gRPC, counting nothing.
func TestRLSMessageSize(t *testing.T) {
	ta := startApp(t, rlsYAML+"limits: {max_body_bytes: 1024}\n")
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	_, err := c.ShouldRateLimit(context.Background(), servertest.RLSReq("edge", servertest.Desc("remote_address", "203.0.113.7"), servertest.Desc("tight", strings.Repeat("k", 1100))))
	assert.Equal(t, codes.ResourceExhausted, grpcstatus.Code(err))
	assert.Equal(t, uint64(0), ta.KeyTotal("per-ip", "203.0.113.7"))
	servertest.ShouldRL(t, c, servertest.RLSReq("edge", servertest.Desc("remote_address", "203.0.113.7")))
	assert.Equal(t, uint64(1), ta.KeyTotal("per-ip", "203.0.113.7"))
}

// TestRLSToken: with api.token_file the service needs "authorization:
// Bearer <token>" in the gRPC metadata; the health service does not.
func TestRLSToken(t *testing.T) {
	tokFile := servertest.WriteTokens(t, t.TempDir(), servertest.Token1+"\n")
	ta := startApp(t, rlsYAML+"api: {token_file: "+tokFile+"}\n")
	ta.Token = servertest.Token1
	c, cc := servertest.RLSClient(t, ta.App.GRPCAddr())
	req := servertest.RLSReq("edge", servertest.Desc("remote_address", "203.0.113.7"))

	_, err := c.ShouldRateLimit(context.Background(), req)
	assert.Equal(t, codes.Unauthenticated, grpcstatus.Code(err))
	assert.Contains(t, grpcstatus.Convert(err).Message(), "Bearer <token> required")
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.Token2)
	_, err = c.ShouldRateLimit(ctx, req)
	assert.Equal(t, codes.Unauthenticated, grpcstatus.Code(err))
	assert.Contains(t, grpcstatus.Convert(err).Message(), "invalid bearer token")
	assert.Equal(t, uint64(0), ta.KeyTotal("per-ip", "203.0.113.7"))

	ctx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.Token1)
	res, err := c.ShouldRateLimit(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	assert.Equal(t, 2.0, ta.rlsRequests("unauthenticated"))

	hres, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hres.GetStatus())

	// The token is checked on the stream's headers, before the message is
	// read: a message over limits.max_body_bytes (which gRPC would refuse as
	// ResourceExhausted once read) without a token is Unauthenticated.
	big := servertest.RLSReq("edge", servertest.Desc("remote_address", strings.Repeat("k", int(2<<20))))
	_, err = c.ShouldRateLimit(context.Background(), big)
	assert.Equal(t, codes.Unauthenticated, grpcstatus.Code(err), "%v", err)
	_, err = c.ShouldRateLimit(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.Token1), big)
	assert.Equal(t, codes.ResourceExhausted, grpcstatus.Code(err), "%v", err)
}

// TestRLSReload: the rls section reloads with the rules; counts of kept
// rules stay.
func TestRLSReload(t *testing.T) {
	ta := startApp(t, rlsYAML)
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	req := servertest.RLSReq("edge", servertest.Desc("remote_address", "203.0.113.7"))
	servertest.ShouldRL(t, c, req)
	ta.WriteConfig(rlsYAML + "    - domain: internal\n      descriptors: [{entries: [remote_address], rule: per-ip}]\n")
	require.NoError(t, ta.App.Reload())
	res := servertest.ShouldRL(t, c, servertest.RLSReq("internal", servertest.Desc("remote_address", "203.0.113.7")))
	assert.Equal(t, uint32(1), res.GetStatuses()[0].GetLimitRemaining(), "the new domain maps to per-ip, whose count was kept")

	ta.WriteConfig(rlsYAML + "    - domain: internal\n      descriptors: [{entries: [remote_address], rule: nope}]\n")
	require.ErrorContains(t, ta.App.Reload(), `rls.domains[1].descriptors[0].rule: unknown rule "nope"`)
	res = servertest.ShouldRL(t, c, servertest.RLSReq("internal", servertest.Desc("remote_address", "203.0.113.7")))
	assert.Equal(t, "per-ip", res.GetStatuses()[0].GetCurrentLimit().GetName(), "the old config keeps serving")
	assert.Equal(t, uint32(0), res.GetStatuses()[0].GetLimitRemaining())
}

// TestRLSTokenScope: the rate limit service takes only tokens of the scope
// decide; another valid token (a metrics-only one of api.tokens) is
// PermissionDenied and spends nothing.
func TestRLSTokenScope(t *testing.T) {
	dir := t.TempDir()
	admin := servertest.WriteTokens(t, dir, servertest.Token1+"\n")
	metricsTok := filepath.Join(dir, "metrics")
	require.NoError(t, os.WriteFile(metricsTok, []byte(servertest.Token2+"\n"), 0o600))
	ta := startApp(t, rlsYAML+"api: {token_file: "+admin+", tokens: [{file: "+metricsTok+", scopes: [metrics]}]}\n")
	ta.Token = servertest.Token1
	c, _ := servertest.RLSClient(t, ta.App.GRPCAddr())
	req := servertest.RLSReq("edge", servertest.Desc("remote_address", "203.0.113.7"))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.Token2)
	_, err := c.ShouldRateLimit(ctx, req)
	assert.Equal(t, codes.PermissionDenied, grpcstatus.Code(err), "%v", err)
	assert.Contains(t, grpcstatus.Convert(err).Message(), "lacks the scope decide")
	assert.Equal(t, uint64(0), ta.KeyTotal("per-ip", "203.0.113.7"))
	assert.Equal(t, 1.0, ta.rlsRequests("permission_denied"))
	_, err = c.ShouldRateLimit(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+servertest.Token1), req)
	require.NoError(t, err)
}
