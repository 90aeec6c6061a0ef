package server

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

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

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/pop"
)

// The Envoy rate limit service (envoy.service.ratelimit.v3.RateLimitService,
// "RLS v3") on listen.grpc.
//
// A request names a domain and descriptors, each a list of (key, value)
// entries. The rls section maps a domain's descriptor shapes (entry keys in
// order, optionally a fixed value) to rules; the values of a matching
// descriptor's entries, as a composite key (composeKey), are the key
// counted. A descriptor matching no shape, or an unknown domain, is not
// limited (OK without a current limit), as with envoyproxy/ratelimit.
//
// Each matching descriptor becomes one check, and the checks are decided
// all or nothing by the node's pipeline, as a proxied request's rules are:
// a denied request spends nothing, descriptors of one rule and key are
// judged with their summed cost, a hits_addend of 0 is a probe (judged,
// never counted), and a cost over what the rule can ever admit is a
// denial.

// rlsTable is the compiled rls section, part of a ruleSet (so that it
// reloads with the rules it names).
type rlsTable struct {
	domains map[string]*rlsDomain
}

// rlsDomain holds one domain's descriptor shapes.
type rlsDomain struct {
	// shapes maps the entry keys of a descriptor, joined by NUL, to the
	// shapes with those keys, the most specific first: at the first
	// position where two differ, the one with a fixed value wins.
	shapes map[string][]*rlsShape
}

// rlsShape is one descriptor shape of the rls section and its rule.
type rlsShape struct {
	entries []config.RLSEntry
	rule    *compiledRule
	// tier is the index of the entry that names the tier (rls descriptor
	// field tier), left out of the key; -1 for none.
	tier int
	// limit is the descriptor status's current_limit: shared by every
	// response, never modified.
	limit *rlsv3.RateLimitResponse_RateLimit
}

// compileRLS compiles a validated rls section against the rules of rs.
func compileRLS(c config.RLS, byName map[string]*compiledRule) *rlsTable {
	t := &rlsTable{domains: make(map[string]*rlsDomain, len(c.Domains))}
	limits := map[*compiledRule]*rlsv3.RateLimitResponse_RateLimit{}
	for _, d := range c.Domains {
		dom := &rlsDomain{shapes: map[string][]*rlsShape{}}
		for _, ds := range d.Descriptors {
			cr := byName[ds.Rule]
			if cr == nil {
				continue // refused by config validation
			}
			sh := &rlsShape{rule: cr, tier: -1}
			var sig []byte
			for i, e := range ds.Entries {
				pe, err := config.ParseRLSEntry(e)
				if err != nil {
					continue // refused by config validation
				}
				if ds.Tier != "" && pe.Key == ds.Tier {
					sh.tier = i
				}
				sh.entries = append(sh.entries, pe)
				if i > 0 {
					sig = append(sig, 0)
				}
				sig = append(sig, pe.Key...)
			}
			if limits[cr] == nil {
				limits[cr] = rlsCurrentLimit(cr.pop)
			}
			sh.limit = limits[cr]
			dom.shapes[string(sig)] = append(dom.shapes[string(sig)], sh)
		}
		for _, list := range dom.shapes {
			slices.SortStableFunc(list, func(a, b *rlsShape) int {
				for i := range a.entries {
					if fa, fb := a.entries[i].Value != "", b.entries[i].Value != ""; fa != fb {
						if fa {
							return -1
						}
						return 1
					}
				}
				return 0
			})
		}
		t.domains[d.Domain] = dom
	}
	return t
}

// match returns the shape that entries match, or nil. sig is scratch space.
func (d *rlsDomain) match(entries []*rlcommonv3.RateLimitDescriptor_Entry, sig *[]byte) *rlsShape {
	b := (*sig)[:0]
	for i, e := range entries {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, e.GetKey()...)
	}
	*sig = b
	for _, sh := range d.shapes[string(b)] {
		if sh.matches(entries) {
			return sh
		}
	}
	return nil
}

// matches reports whether entries have the shape's keys in order, a
// non-empty value each, and the shape's fixed values.
func (sh *rlsShape) matches(entries []*rlcommonv3.RateLimitDescriptor_Entry) bool {
	if len(entries) != len(sh.entries) {
		return false
	}
	for i, e := range entries {
		want := sh.entries[i]
		if e.GetKey() != want.Key || e.GetValue() == "" || (want.Value != "" && e.GetValue() != want.Value) {
			return false
		}
	}
	return true
}

// rlsKey is the key a matching descriptor counts: its values as a
// composite key (composeKey, as in proxy mode), the tier entry's (index
// tier, -1 for none) left out, hashed when longer than the store accepts.
// vals is scratch space.
func rlsKey(entries []*rlcommonv3.RateLimitDescriptor_Entry, tier int, vals *[]string) string {
	if len(entries) == 1 {
		return boundKey(entries[0].GetValue())
	}
	if len(entries) == 2 && tier >= 0 {
		return boundKey(entries[1-tier].GetValue())
	}
	v := (*vals)[:0]
	for i, e := range entries {
		if i != tier {
			v = append(v, e.GetValue())
		}
	}
	*vals = v
	k := boundKey(composeKey(v))
	clear(v)
	return k
}

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
	ok, overLimit, unknownDomain, invalid, unauthenticated prometheus.Counter
	unmatched                                              prometheus.Counter
}

func newRLSMetrics(reg *prometheus.Registry) *rlsMetrics {
	req := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "geolimit_rls_requests_total",
		Help: "Rate limit service (gRPC ShouldRateLimit) requests by result: ok, over_limit, unknown_domain (answered OK without limits), invalid_argument, unauthenticated.",
	}, []string{"result"})
	unmatched := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "geolimit_rls_unmatched_descriptors_total",
		Help: "Descriptors of a known domain that matched no descriptor of the rls section (or had an empty value): answered OK without a limit.",
	})
	reg.MustRegister(req, unmatched)
	return &rlsMetrics{
		ok: req.WithLabelValues("ok"), overLimit: req.WithLabelValues("over_limit"),
		unknownDomain: req.WithLabelValues("unknown_domain"), invalid: req.WithLabelValues("invalid_argument"),
		unauthenticated: req.WithLabelValues("unauthenticated"), unmatched: unmatched,
	}
}

// rlsService serves ShouldRateLimit for an App.
type rlsService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	a *App
}

// newGRPCServer builds the gRPC server of listen.grpc: the rate limit
// service and the standard health service (which needs no token, like
// /healthz).
func (a *App) newGRPCServer() *grpc.Server {
	s := grpc.NewServer(
		grpc.MaxRecvMsgSize(int(min(a.cfg.Limits.MaxBodyBytes, math.MaxInt32))),
		grpc.ConnectionTimeout(a.cfg.HTTP.ReadHeaderTimeout.D()),
		// The token is checked on a stream's headers, before its message is
		// read and decoded: a peer without one costs no decoding.
		grpc.InTapHandle(a.grpcTap),
		// One connection cannot open streams without bound, nor ping
		// without bound; idle connections are closed.
		grpc.MaxConcurrentStreams(grpcMaxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: a.cfg.HTTP.IdleTimeout.D()}),
	)
	rlsv3.RegisterRateLimitServiceServer(s, &rlsService{a: a})
	a.health = health.NewServer()
	a.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, a.health)
	return s
}

// grpcMaxStreams bounds the concurrent streams of one gRPC connection (Envoy
// multiplexes its rate limit calls over a few connections).
const grpcMaxStreams = 256

// grpcTap refuses a stream whose headers carry no valid bearer token, when
// api.token_file is set, before its message is read; the health service
// stays open. ShouldRateLimit checks the token again (a reload may have
// changed the tokens in between).
func (a *App) grpcTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	au := a.auth.Load()
	if au == nil || strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	switch au.checkValues(info.Header.Get("authorization")) {
	case authOK:
		return ctx, nil
	case authMissing:
		a.rlsMet.unauthenticated.Inc()
		return ctx, status.Error(codes.Unauthenticated, "authorization: Bearer <token> required in the gRPC metadata")
	default:
		a.rlsMet.unauthenticated.Inc()
		return ctx, status.Error(codes.Unauthenticated, "authorization: invalid bearer token")
	}
}

// rlsScratch is the pooled state of one request: the check index of each
// descriptor (-1: not limited) and scratch space for matching and keys.
type rlsScratch struct {
	idx    []int
	shapes []*rlsShape
	sig    []byte
	kvals  []string
	tally  batchScratch
}

var rlsPool = newPool(func() *rlsScratch { return &rlsScratch{} })

// release returns sc to the pool, holding no request's strings and no
// oversized buffer.
func (sc *rlsScratch) release() {
	clear(sc.shapes)
	if cap(sc.sig) > 1<<16 {
		sc.sig = nil
	}
	rlsPool.put(sc)
}

func rlsInvalid(m *rlsMetrics, msg string) error {
	m.invalid.Inc()
	return status.Error(codes.InvalidArgument, msg)
}

// ShouldRateLimit decides a request's descriptors (see the comment at the
// top of this file). Bad input is InvalidArgument and spends nothing.
func (s *rlsService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	a := s.a
	start := time.Now()
	m := a.rlsMet
	if au := a.auth.Load(); au != nil {
		switch au.checkValues(metadata.ValueFromIncomingContext(ctx, "authorization")) {
		case authOK:
		case authMissing:
			m.unauthenticated.Inc()
			return nil, status.Error(codes.Unauthenticated, "authorization: Bearer <token> required in the gRPC metadata")
		default:
			m.unauthenticated.Inc()
			return nil, status.Error(codes.Unauthenticated, "authorization: invalid bearer token")
		}
	}
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return nil, rlsInvalid(m, "domain: must not be empty")
	case len(descs) == 0:
		return nil, rlsInvalid(m, "descriptors: at least one required")
	case len(descs) > a.cfg.Limits.MaxBatch:
		return nil, rlsInvalid(m, "descriptors: "+strconv.Itoa(len(descs))+" in one request, more than limits.max_batch "+strconv.Itoa(a.cfg.Limits.MaxBatch))
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
	rs := a.rules.Load()
	dom := rs.rls.domains[req.GetDomain()]
	if dom == nil {
		m.unknownDomain.Inc()
		resp, _ := rlsResponse(len(descs))
		a.met.latencyRLS.Observe(time.Since(start).Seconds())
		return resp, nil
	}

	sc := rlsPool.get()
	defer sc.release()
	cs := checksPool.get()
	defer checksPool.put(cs)
	cs.reset(pop.All, false)
	sc.idx = slices.Grow(sc.idx[:0], len(descs))[:len(descs)]
	sc.shapes = slices.Grow(sc.shapes[:0], len(descs))[:len(descs)]
	unmatched := 0
	for i, d := range descs {
		sh := dom.match(d.GetEntries(), &sc.sig)
		sc.shapes[i] = sh
		if sh == nil {
			sc.idx[i] = -1
			unmatched++
			continue
		}
		cr := sh.rule
		tier := ""
		if sh.tier >= 0 {
			tier = d.GetEntries()[sh.tier].GetValue()
		}
		probe := false
		var cost uint64
		switch ha := d.GetHitsAddend(); {
		case ha != nil && ha.GetValue() == 0:
			probe, cost = true, cr.pop.Cost
		case ha != nil:
			cost = ha.GetValue()
		case req.GetHitsAddend() > 0:
			cost = uint64(req.GetHitsAddend())
		default:
			cost = cr.pop.Cost
		}
		sc.idx[i] = len(cs.req.Checks)
		cs.add(cr, rlsKey(d.GetEntries(), sh.tier, &sc.kvals), tier, cost)
		cs.req.Checks[sc.idx[i]].Probe = probe
	}
	if unmatched > 0 {
		m.unmatched.Add(float64(unmatched))
	}
	if len(cs.req.Checks) > 0 {
		_ = cs.decide(a.node, a.clk.Now()) // not strict: no error
	} else {
		cs.out = pop.Outcome{Allowed: true, Binding: -1}
	}

	resp, slots := rlsResponse(len(descs))
	for i, ci := range sc.idx {
		if ci < 0 || cs.res[ci].Err != nil {
			continue // not limited, or its rule went away in a reload
		}
		st := &slots[i].st
		d := cs.res[ci].Decision
		st.CurrentLimit = sc.shapes[i].limit
		st.LimitRemaining = uint32(min(d.Remaining, math.MaxUint32))
		wait := d.Reset
		if !d.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			wait = d.RetryAfter
		}
		dur := &slots[i].dur
		dur.Seconds, dur.Nanos = int64(wait/time.Second), int32(wait%time.Second)
		st.DurationUntilReset = dur
		// Counted in geolimit_decisions_total: the decisions that stand for
		// the request (pop.Outcome.Stands).
		if cs.out.Stands(cs.res, ci, pop.All) {
			sc.tally.count(cs.rules[ci].m, d)
		}
	}
	a.flushCounts(&sc.tally)
	if !cs.out.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		m.overLimit.Inc()
	} else {
		m.ok.Inc()
	}
	// The headers follow the binding descriptor, as in proxy mode.
	if cr, d := cs.binding(); cr != nil {
		resp.ResponseHeadersToAdd = rlsHeaders(cr, d, cs.moreAfter(a.node, a.clk.Now()))
	}
	a.met.latencyRLS.Observe(time.Since(start).Seconds())
	return resp, nil
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

// rlsHeaderOrder lists the RateLimit headers in the order they are added,
// with their lower-case names.
var rlsHeaderOrder = [...]struct{ canon, lower string }{
	{hPolicy, "ratelimit-policy"},
	{hRateLimit, "ratelimit"},
	{hXLimit, "x-ratelimit-limit"},
	{hXRemaining, "x-ratelimit-remaining"},
	{hXReset, "x-ratelimit-reset"},
	{hRetryAfter, "retry-after"},
}

// rlsHeaders returns the RateLimit headers of the binding rule's decision,
// exactly as the HTTP API writes them (setRateLimitHeaders), with
// lower-case names.
func rlsHeaders(cr *compiledRule, d pop.Decision, more time.Duration) []*corev3.HeaderValue {
	h := make(http.Header, len(rlsHeaderOrder))
	setRateLimitHeaders(h, cr, d, more)
	vals := make([]corev3.HeaderValue, len(h))
	out := make([]*corev3.HeaderValue, 0, len(h))
	for _, n := range rlsHeaderOrder {
		if v := h[n.canon]; len(v) > 0 && len(out) < len(vals) {
			hv := &vals[len(out)]
			hv.Key, hv.Value = n.lower, v[0]
			out = append(out, hv)
		}
	}
	return out
}

// drainGRPC stops the gRPC server: the health service turns NOT_SERVING,
// running requests finish, then connections close; at once when ctx ends
// first.
func (a *App) drainGRPC(ctx context.Context) error {
	a.health.Shutdown()
	done := make(chan struct{})
	go func() {
		a.grpcSrv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		a.grpcSrv.Stop()
		<-done
		return fmt.Errorf("server: drain grpc: %w", ctx.Err())
	}
}
