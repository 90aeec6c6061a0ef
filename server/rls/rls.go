// Package rls is the Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService, "RLS v3") of listen.grpc,
// and the standard gRPC health service beside it. It maps a request's
// descriptors to checks of the rules the rls section names and lets the
// node's pipeline decide them all or nothing, as proxy mode decides a
// request's rules.
package rls

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/frontend"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/geolimit/geolimit/pop"
)

// A request names a domain and descriptors; the rls section's domains
// classify each descriptor into a check of a rule (frontend.Rules.Domains,
// frontend.ClassifyDescriptor), and the checks are decided all or nothing
// by the node's pipeline (frontend.Env.Decide), as a proxied request's
// rules are: a denied request spends nothing, descriptors of one rule and
// key are judged with their summed cost, a hits_addend of 0 is a probe
// (judged, never counted), and a cost over what the rule can ever admit is
// a denial. This file parses the request and renders the answer.

// rlsUnits are the units current_limit is reported in, shortest first.
// MONTH is 30 days, as envoyproxy/ratelimit counts it.
var rlsUnits = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
}

// rlsCurrentLimit reports a rule as requests per unit: the unit is the
// shortest one at least as long as the window, and requests_per_unit the
// rule's rate over that unit, limit × unit / window rounded down (at most
// 2^32-1). A window of exactly one unit reports the limit itself; 100 per
// 10s reads 600 per MINUTE, the same rate, never 100 per SECOND, which
// would claim ten times the rate.
func rlsCurrentLimit(r pop.Rule) *rlsv3.RateLimitResponse_RateLimit {
	u := rlsUnits[len(rlsUnits)-1]
	for _, x := range rlsUnits {
		if x.d >= r.Window {
			u = x
			break
		}
	}
	per := uint64(math.MaxUint32)
	if hi, lo := bits.Mul64(r.Limit, uint64(u.d)); hi < uint64(r.Window) {
		q, _ := bits.Div64(hi, lo, uint64(r.Window))
		per = min(q, per)
	}
	return &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: uint32(per), Unit: u.unit}
}

// rlsMetrics are the rate limit service's own counters.
type rlsMetrics struct {
	ok, overLimit, unknownDomain, invalid, unauthenticated, denied prometheus.Counter
	unmatched                                                      prometheus.Counter
}

func newRLSMetrics(reg *prometheus.Registry) *rlsMetrics {
	req := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "geolimit_rls_requests_total",
		Help: "Rate limit service (gRPC ShouldRateLimit) requests by result: ok, over_limit, unknown_domain (answered OK without limits), invalid_argument, unauthenticated, permission_denied (a token without the scope decide).",
	}, []string{"result"})
	unmatched := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "geolimit_rls_unmatched_descriptors_total",
		Help: "Descriptors of a known domain that matched no descriptor of the rls section (or had an empty value): answered OK without a limit.",
	})
	reg.MustRegister(req, unmatched)
	return &rlsMetrics{
		ok: req.WithLabelValues("ok"), overLimit: req.WithLabelValues("over_limit"),
		unknownDomain: req.WithLabelValues("unknown_domain"), invalid: req.WithLabelValues("invalid_argument"),
		unauthenticated: req.WithLabelValues("unauthenticated"), denied: req.WithLabelValues("permission_denied"),
		unmatched: unmatched,
	}
}

// Config configures a Service.
type Config struct {
	// Tokens holds the API's bearer tokens (nil inside: no token needed);
	// a reload swaps them.
	Tokens *atomic.Pointer[frontend.Tokens]
	// MaxBatch caps the descriptors of one request (limits.max_batch).
	MaxBatch int
	// MaxMsgBytes caps a request message (limits.max_body_bytes).
	MaxMsgBytes int64
	// ConnectionTimeout bounds a new connection's handshake
	// (http.read_header_timeout); IdleTimeout closes an idle connection
	// (http.idle_timeout).
	ConnectionTimeout, IdleTimeout time.Duration
	// Registry takes the service's metrics.
	Registry *prometheus.Registry
	// Latency observes each decided request, in seconds; nil: none.
	Latency prometheus.Observer
}

// Service serves ShouldRateLimit. Safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	env frontend.Env
	cfg Config
	met *rlsMetrics
	// limits are the current_limit of each rule of one snapshot.
	limits atomic.Pointer[limitTable]
	health *health.Server
}

// limitTable is the current_limit of each rule of one rule snapshot,
// shared by every response, never modified.
type limitTable struct {
	rules  *frontend.Rules
	byRule map[*frontend.Rule]*rlsv3.RateLimitResponse_RateLimit
}

// New returns the rate limit service of env's node and rules, its metrics
// registered in cfg.Registry.
func New(env frontend.Env, cfg Config) *Service {
	if cfg.Latency == nil {
		cfg.Latency = nopObserver{}
	}
	return &Service{env: env, cfg: cfg, met: newRLSMetrics(cfg.Registry)}
}

type nopObserver struct{}

func (nopObserver) Observe(float64) {}

// limitsFor returns the current_limit of each rule of the snapshot rs,
// built at the first request after a reload.
func (s *Service) limitsFor(rs *frontend.Rules) map[*frontend.Rule]*rlsv3.RateLimitResponse_RateLimit {
	if c := s.limits.Load(); c != nil && c.rules == rs {
		return c.byRule
	}
	m := make(map[*frontend.Rule]*rlsv3.RateLimitResponse_RateLimit, len(rs.List))
	for _, cr := range rs.List {
		m[cr] = rlsCurrentLimit(cr.Pop)
	}
	s.limits.Store(&limitTable{rules: rs, byRule: m})
	return m
}

// NewServer builds the gRPC server of listen.grpc: the rate limit service
// and the standard health service (which needs no token, like /healthz).
func (s *Service) NewServer() *grpc.Server {
	g := grpc.NewServer(
		// Descriptor values that are not valid UTF-8 are decided, not
		// refused (lenient.go).
		grpc.ForceServerCodecV2(newLenientCodec()),
		grpc.MaxRecvMsgSize(int(min(s.cfg.MaxMsgBytes, math.MaxInt32))),
		grpc.ConnectionTimeout(s.cfg.ConnectionTimeout),
		// The token is checked on a stream's headers, before its message is
		// read and decoded: a peer without one costs no decoding.
		grpc.InTapHandle(s.tap),
		// One connection cannot open streams without bound, nor ping
		// without bound; idle connections are closed.
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.cfg.IdleTimeout}),
	)
	rlsv3.RegisterRateLimitServiceServer(g, s)
	s.health = health.NewServer()
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, s.health)
	return g
}

// grpcMaxStreams bounds the concurrent streams of one gRPC connection (Envoy
// multiplexes its rate limit calls over a few connections).
const grpcMaxStreams = 256

// grpcTap refuses a stream whose headers carry no valid bearer token, when
// api.token_file is set, before its message is read; the health service
// stays open. ShouldRateLimit checks the token again (a reload may have
// changed the tokens in between).
func (s *Service) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	au := s.cfg.Tokens.Load()
	if au == nil || strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	return ctx, s.authorize(au, info.Header.Get("authorization"))
}

// authorize checks the values v of the metadata key "authorization"
// against au: a token of the scope decide.
func (s *Service) authorize(au *frontend.Tokens, v []string) error {
	switch au.AuthorizeValues(v, config.ScopeDecide) {
	case frontend.AuthOK:
		return nil
	case frontend.AuthMissing:
		s.met.unauthenticated.Inc()
		return status.Error(codes.Unauthenticated, "authorization: Bearer <token> required in the gRPC metadata")
	case frontend.AuthForbidden:
		s.met.denied.Inc()
		return status.Error(codes.PermissionDenied, "authorization: this token lacks the scope decide")
	default:
		s.met.unauthenticated.Inc()
		return status.Error(codes.Unauthenticated, "authorization: invalid bearer token")
	}
}

// rlsScratch is the pooled state of one request: the check index of each
// descriptor (-1: not limited) and the classifier's scratch space.
type rlsScratch struct {
	idx  []int
	desc frontend.DescriptorScratch
}

var rlsPool = frontend.NewPool(func() *rlsScratch { return &rlsScratch{} })

// release returns sc to the pool, holding no request's strings and no
// oversized buffer.
func (sc *rlsScratch) release() {
	sc.desc.Reset()
	rlsPool.Put(sc)
}

func rlsInvalid(m *rlsMetrics, msg string) error {
	m.invalid.Inc()
	return status.Error(codes.InvalidArgument, msg)
}

// ShouldRateLimit decides a request's descriptors (see the comment at the
// top of this file). Bad input is InvalidArgument and spends nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	m := s.met
	if au := s.cfg.Tokens.Load(); au != nil {
		if err := s.authorize(au, metadata.ValueFromIncomingContext(ctx, "authorization")); err != nil {
			return nil, err
		}
	}
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, rlsInvalid(m, "domain: must not be empty")
	case len(descs) == 0:
		return nil, rlsInvalid(m, "descriptors: at least one required")
	case len(descs) > s.cfg.MaxBatch:
		return nil, rlsInvalid(m, "descriptors: "+strconv.Itoa(len(descs))+" in one request, more than limits.max_batch "+strconv.Itoa(s.cfg.MaxBatch))
	}
	for i, d := range descs {
		if len(d.GetEntries()) == 0 {
			return nil, rlsInvalid(m, "descriptors["+strconv.Itoa(i)+"].entries: at least one required")
		}
		if d.GetIsNegativeHits() {
			return nil, rlsInvalid(m, "descriptors["+strconv.Itoa(i)+"].is_negative_hits: not supported (counts only grow; nothing can be given back)")
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, rlsInvalid(m, "descriptors["+strconv.Itoa(i)+"].entries["+strconv.Itoa(j)+"].key: must not be empty")
			}
		}
	}
	rs := s.env.Rules.Load()
	dom := rs.Domains[req.GetDomain()]
	if dom == nil {
		m.unknownDomain.Inc()
		resp, _ := rlsResponse(len(descs))
		s.cfg.Latency.Observe(time.Since(start).Seconds())
		return resp, nil
	}

	sc := rlsPool.Get()
	defer sc.release()
	cs := frontend.GetChecks(pop.All, false)
	sc.idx = slices.Grow(sc.idx[:0], len(descs))[:len(descs)]
	unmatched := 0
	for i, d := range descs {
		ds, ok := frontend.ClassifyDescriptor(dom, d.GetEntries(), &sc.desc)
		if !ok {
			sc.idx[i] = -1
			unmatched++
			continue
		}
		cost, probe := rlsCost(d, req, ds.Rule)
		sc.idx[i] = len(cs.Req.Checks)
		cs.Add(ds.Rule, ds.Value, ds.Tier, ds.Idem, cost).Probe = probe
	}
	if unmatched > 0 {
		m.unmatched.Add(float64(unmatched))
	}
	ans := s.env.Decide(cs, http.StatusTooManyRequests, nil) // not strict: no error
	defer ans.Put()
	resp := s.render(&ans, rs, sc.idx)
	if !ans.Allowed {
		m.overLimit.Inc()
	} else {
		m.ok.Inc()
	}
	s.cfg.Latency.Observe(time.Since(start).Seconds())
	return resp, nil
}

// rlsCost is the cost of descriptor d of req and whether it is a probe:
// its hits_addend (0: a probe at the rule's cost), else the request's,
// else the rule's cost.
func rlsCost(d *rlcommonv3.RateLimitDescriptor, req *rlsv3.RateLimitRequest, cr *frontend.Rule) (cost uint64, probe bool) {
	switch ha := d.GetHitsAddend(); {
	case ha != nil && ha.GetValue() == 0:
		return cr.Pop.Cost, true
	case ha != nil:
		return ha.GetValue(), false
	case req.GetHitsAddend() > 0:
		return uint64(req.GetHitsAddend()), false
	}
	return cr.Pop.Cost, false
}

// render is the response of the answer ans to a request whose
// descriptor i is check idx[i] (-1: not limited): a status per
// descriptor, the overall code, and the answer's header fields.
func (s *Service) render(ans *frontend.Answer, rs *frontend.Rules, idx []int) *rlsv3.RateLimitResponse {
	cs := ans.Checks
	limits := s.limitsFor(rs)
	resp, slots, hdrs := rlsResponseHeaders(len(idx), ans.Headers)
	for i, ci := range idx {
		if ci < 0 || cs.Res[ci].Err != nil {
			continue // not limited, or its rule went away in a reload
		}
		st := &slots[i].st
		d := cs.Res[ci].Decision
		st.CurrentLimit = limits[cs.Rules[ci]]
		st.LimitRemaining = uint32(min(d.Remaining, math.MaxUint32))
		wait := d.Reset
		if !d.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			wait = d.RetryAfter
		}
		dur := &slots[i].dur
		dur.Seconds, dur.Nanos = int64(wait/time.Second), int32(wait%time.Second)
		st.DurationUntilReset = dur
	}
	if !ans.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	// The headers follow the binding descriptor, as in proxy mode.
	resp.ResponseHeadersToAdd = hdrs
	return resp
}

// rlsOne is the whole response to a request of one descriptor, its
// status and header fields, allocated at once: the common request (Envoy
// sends one descriptor per rate limit action) costs one allocation
// instead of five.
type rlsOne struct {
	resp rlsv3.RateLimitResponse
	st   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	slot [1]rlsSlot
	vals [frontend.NumFields]corev3.HeaderValue
	hdrs [frontend.NumFields]*corev3.HeaderValue
}

// rlsResponseHeaders is rlsResponse with the header fields h
// (rlsHeaders) beside it.
func rlsResponseHeaders(n int, h frontend.Headers) (*rlsv3.RateLimitResponse, []rlsSlot, []*corev3.HeaderValue) {
	if n != 1 {
		resp, slots := rlsResponse(n)
		return resp, slots, rlsHeaders(h)
	}
	o := new(rlsOne)
	o.slot[0].st.Code = rlsv3.RateLimitResponse_OK
	o.st[0] = &o.slot[0].st
	o.resp.OverallCode, o.resp.Statuses = rlsv3.RateLimitResponse_OK, o.st[:]
	return &o.resp, o.slot[:], fillHeaders(h, o.vals[:0], o.hdrs[:0])
}

// rlsSlot is one descriptor status and its duration, allocated together.
type rlsSlot struct {
	st  rlsv3.RateLimitResponse_DescriptorStatus
	dur durationpb.Duration
}

// rlsResponse returns an OK response with n OK statuses (without a limit
// or a duration) and their slots.
func rlsResponse(n int) (*rlsv3.RateLimitResponse, []rlsSlot) {
	slots := make([]rlsSlot, n)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	for i := range slots {
		slots[i].st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = &slots[i].st
	}
	return resp, slots
}

// rlsHeaders returns the answer's header fields in order, with
// lower-case names, as Envoy wants them; nil for none.
func rlsHeaders(h frontend.Headers) []*corev3.HeaderValue {
	n := 0
	for f := range frontend.NumFields {
		if h.Has(f) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fillHeaders(h, make([]corev3.HeaderValue, 0, n), make([]*corev3.HeaderValue, 0, n))
}

// fillHeaders appends h's fields to vals and pointers to them to out,
// whose capacities must hold them all; nil for none.
func fillHeaders(h frontend.Headers, vals []corev3.HeaderValue, out []*corev3.HeaderValue) []*corev3.HeaderValue {
	for f := range frontend.NumFields {
		if h.Has(f) {
			vals = vals[:len(vals)+1]
			hv := &vals[len(vals)-1]
			hv.Key, hv.Value = f.Lower(), h.Value(f)
			out = append(out, hv)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Drain stops the gRPC server g (built by NewServer): the health service turns NOT_SERVING,
// running requests finish, then connections close; at once when ctx ends
// first.
func (s *Service) Drain(ctx context.Context, g *grpc.Server) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.Stop()
		<-done
		return fmt.Errorf("rls: drain grpc: %w", ctx.Err())
	}
}
