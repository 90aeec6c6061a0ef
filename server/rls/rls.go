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
	"github.com/geolimit/geolimit/server/frontend"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// A request names a domain and descriptors, each a list of (key, value)
// entries. The rls section maps a domain's descriptor shapes (entry keys in
// order, optionally a fixed value) to rules; the values of a matching
// descriptor's entries, as a composite key (frontend.ComposeKey), are the key
// counted. A descriptor matching no shape, or an unknown domain, is not
// limited (OK without a current limit), as with envoyproxy/ratelimit.
//
// Each matching descriptor becomes one check, and the checks are decided
// all or nothing by the node's pipeline, as a proxied request's rules are:
// a denied request spends nothing, descriptors of one rule and key are
// judged with their summed cost, a hits_addend of 0 is a probe (judged,
// never counted), and a cost over what the rule can ever admit is a
// denial.

// rlsTable is the compiled rls section of one rule snapshot (Service
// compiles it once per snapshot, so that it reloads with the rules it
// names).
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
	rule    *frontend.Rule
	// tier is the index of the entry that names the tier (rls descriptor
	// field tier), left out of the key; -1 for none.
	tier int
	// idem is the index of the entry that carries the idempotency key (rls
	// descriptor field idempotency_key), left out of the key; -1 for none.
	idem int
	// limit is the descriptor status's current_limit: shared by every
	// response, never modified.
	limit *rlsv3.RateLimitResponse_RateLimit
}

// compileRLS compiles a validated rls section against the rules of rs.
func compileRLS(c config.RLS, byName map[string]*frontend.Rule) *rlsTable {
	t := &rlsTable{domains: make(map[string]*rlsDomain, len(c.Domains))}
	limits := map[*frontend.Rule]*rlsv3.RateLimitResponse_RateLimit{}
	for _, d := range c.Domains {
		dom := &rlsDomain{shapes: map[string][]*rlsShape{}}
		for _, ds := range d.Descriptors {
			cr := byName[ds.Rule]
			if cr == nil {
				continue // refused by config validation
			}
			sh := &rlsShape{rule: cr, tier: -1, idem: -1}
			var sig []byte
			for i, e := range ds.Entries {
				pe, err := config.ParseRLSEntry(e)
				if err != nil {
					continue // refused by config validation
				}
				if ds.Tier != "" && pe.Key == ds.Tier {
					sh.tier = i
				}
				if ds.IdempotencyKey != "" && pe.Key == ds.IdempotencyKey {
					sh.idem = i
				}
				sh.entries = append(sh.entries, pe)
				if i > 0 {
					sig = append(sig, 0)
				}
				sig = append(sig, pe.Key...)
			}
			if limits[cr] == nil {
				limits[cr] = rlsCurrentLimit(cr.Pop)
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
// composite key (frontend.ComposeKey, as in proxy mode), the tier entry's
// and the idempotency key entry's (indexes tier and idem, -1 for none)
// left out, hashed when longer than the store accepts. vals is scratch
// space.
func rlsKey(entries []*rlcommonv3.RateLimitDescriptor_Entry, tier, idem int, vals *[]string) string {
	if len(entries) == 1 {
		return frontend.BoundKey(entries[0].GetValue())
	}
	if len(entries) == 2 && (tier >= 0) != (idem >= 0) {
		return frontend.BoundKey(entries[1-max(tier, idem)].GetValue())
	}
	if len(entries) == 3 && tier >= 0 && idem >= 0 {
		return frontend.BoundKey(entries[3-tier-idem].GetValue())
	}
	v := (*vals)[:0]
	for i, e := range entries {
		if i != tier && i != idem {
			v = append(v, e.GetValue())
		}
	}
	*vals = v
	k := frontend.BoundKey(frontend.ComposeKey(v))
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
	// table is the rls section compiled for one rule snapshot.
	table  atomic.Pointer[compiled]
	health *health.Server
}

// compiled is the rls table of one rule snapshot.
type compiled struct {
	rules *frontend.Rules
	table *rlsTable
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

// tableFor returns the rls table of the snapshot rs, compiling it at the
// first request after a reload.
func (s *Service) tableFor(rs *frontend.Rules) *rlsTable {
	if c := s.table.Load(); c != nil && c.rules == rs {
		return c.table
	}
	t := compileRLS(rs.RLS, rs.ByName)
	s.table.Store(&compiled{rules: rs, table: t})
	return t
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
// descriptor (-1: not limited) and scratch space for matching and keys.
type rlsScratch struct {
	idx    []int
	shapes []*rlsShape
	sig    []byte
	kvals  []string
}

var rlsPool = frontend.NewPool(func() *rlsScratch { return &rlsScratch{} })

// release returns sc to the pool, holding no request's strings and no
// oversized buffer.
func (sc *rlsScratch) release() {
	clear(sc.shapes)
	if cap(sc.sig) > 1<<16 {
		sc.sig = nil
	}
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
	dom := s.tableFor(rs).domains[req.GetDomain()]
	if dom == nil {
		m.unknownDomain.Inc()
		resp, _ := rlsResponse(len(descs))
		s.cfg.Latency.Observe(time.Since(start).Seconds())
		return resp, nil
	}

	sc := rlsPool.Get()
	defer sc.release()
	cs := frontend.GetChecks(pop.All, false)
	defer cs.Put()
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
			probe, cost = true, cr.Pop.Cost
		case ha != nil:
			cost = ha.GetValue()
		case req.GetHitsAddend() > 0:
			cost = uint64(req.GetHitsAddend())
		default:
			cost = cr.Pop.Cost
		}
		sc.idx[i] = len(cs.Req.Checks)
		cs.Add(cr, rlsKey(d.GetEntries(), sh.tier, sh.idem, &sc.kvals), tier, cost)
		cs.Req.Checks[sc.idx[i]].Probe = probe
		if sh.idem >= 0 {
			cs.Req.Checks[sc.idx[i]].IdempotencyKey = frontend.BoundKey(d.GetEntries()[sh.idem].GetValue())
		}
	}
	if unmatched > 0 {
		m.unmatched.Add(float64(unmatched))
	}
	_ = cs.Decide(s.env.Node, s.env.Clock.Now()) // not strict: no error

	resp, slots := rlsResponse(len(descs))
	for i, ci := range sc.idx {
		if ci < 0 || cs.Res[ci].Err != nil {
			continue // not limited, or its rule went away in a reload
		}
		st := &slots[i].st
		d := cs.Res[ci].Decision
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
	}
	// Counted in geolimit_decisions_total: the decisions that stand for the
	// request (pop.Outcome.Stands).
	cs.Tally()
	if !cs.Out.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		m.overLimit.Inc()
	} else {
		m.ok.Inc()
	}
	// The headers follow the binding descriptor, as in proxy mode.
	if cr, d := cs.Binding(); cr != nil {
		resp.ResponseHeadersToAdd = rlsHeaders(cr, d, cs.MoreAfter(s.env.Node, s.env.Clock.Now()))
	}
	if cs.Repeat() {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: rlsRepeatHeader, Value: "true"})
	}
	s.cfg.Latency.Observe(time.Since(start).Seconds())
	return resp, nil
}

// rlsRepeatHeader is frontend.HRepeat in lower case, as Envoy wants it.
var rlsRepeatHeader = strings.ToLower(frontend.HRepeat)

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
	{frontend.HPolicy, "ratelimit-policy"},
	{frontend.HRateLimit, "ratelimit"},
	{frontend.HXLimit, "x-ratelimit-limit"},
	{frontend.HXRemaining, "x-ratelimit-remaining"},
	{frontend.HXReset, "x-ratelimit-reset"},
	{frontend.HRetryAfter, "retry-after"},
}

// rlsHeaders returns the RateLimit headers of the binding rule's decision,
// exactly as the HTTP API writes them (frontend.SetRateLimitHeaders), with
// lower-case names.
func rlsHeaders(cr *frontend.Rule, d pop.Decision, more time.Duration) []*corev3.HeaderValue {
	h := make(http.Header, len(rlsHeaderOrder))
	frontend.SetRateLimitHeaders(h, cr, d, more)
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
