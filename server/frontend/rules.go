package frontend

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/pop"
)

// Rules is an immutable snapshot of the compiled rules, the trusted
// proxies, the forward-auth deny status and the rls domains, swapped
// atomically on reload. Read only once published.
type Rules struct {
	List   []*Rule // config order
	ByName map[string]*Rule
	// Trusted are proxy.trusted_proxies.
	Trusted []netip.Prefix
	// DenyStatus is forward_auth.deny_status.
	DenyStatus int
	// Domains are the rls section's domains, compiled against these rules
	// (ClassifyDescriptor), by name.
	Domains map[string]*Domain
	// IdemHeader is the canonical idempotency.header: where proxy mode,
	// forward auth and the middleware read a request's idempotency key;
	// empty for none.
	IdemHeader string
}

// Rule is a rule ready for the hot path: matchers parsed, header
// values preformatted, metrics resolved.
type Rule struct {
	Pop pop.Rule
	// Handle is the node core's rule of the same snapshot (Bind): every
	// decision goes through it, so a request or batch resolved against
	// this snapshot is decided against it whatever a reload swaps
	// meanwhile.
	Handle pop.RuleHandle
	// Matcher is the rule's match.
	Matcher
	parts []keyPart
	// cal caches a calendar rule's policy field for its current period
	// (calendar.go); nil for other rules.
	cal *calendarPolicy
	// policy is the RateLimit-Policy field: one item per window,
	// "name";q=100;w=60 (rules of several windows: "name/1s";q=20;w=1, ...).
	policy string
	// names are the policy items' names per window, quoted: "name".
	names []string
	// windowMS are the windows' widths in milliseconds, for the answers'
	// window_ms; nil for a rule of one window.
	windowMS []string
	// limitStr is the limit in decimal, for X-RateLimit-Limit.
	limitStr string
	// MaxCost is the largest cost a request may name (pop.Rule.MaxCost),
	// and MaxCostStr the same in decimal.
	MaxCost    uint64
	MaxCostStr string
	// tierHeader is the canonical header that names a request's tier in
	// proxy mode and forward auth (rule field tier); empty for none.
	tierHeader string
	// ruleJSON is the name as a JSON string.
	ruleJSON string
	// Metrics are the rule's decision counters.
	Metrics *RuleMetrics
}

type keyKind uint8

const (
	partIP keyKind = iota
	partHeader
	partPath
	partHost
)

type keyPart struct {
	kind   keyKind
	header string // canonical header name for partHeader
	fold   bool   // partPath: lower case (match.ignore_case)
}

// RuleMetrics are one rule's decision counters, kept across reloads for as
// long as a rule of that name exists.
type RuleMetrics struct {
	Allowed, Denied, ShadowDenied atomic.Uint64
	// Off counts the requests admitted unchecked while the rule was
	// switched off at run time (pop.Decision.Off).
	Off atomic.Uint64
	// Repeats counts the decisions that repeated one remembered for an
	// idempotency key (pop.Result.Repeat), also counted as allowed or
	// denied.
	Repeats atomic.Uint64
	Guards  GuardMetrics
}

// Record counts one decision.
func (m *RuleMetrics) Record(d pop.Decision) {
	switch {
	case d.Off:
		m.Off.Add(1)
	case d.ShadowDenied:
		m.ShadowDenied.Add(1)
	case d.Allowed:
		m.Allowed.Add(1)
	default:
		m.Denied.Add(1)
	}
	m.Guards.Record(d)
}

// RecordResult counts one check's result: its decision, and whether it
// was a repeat.
func (m *RuleMetrics) RecordResult(r *pop.Result) {
	m.Record(r.Decision)
	if r.Repeat {
		m.Repeats.Add(1)
	}
}

// Bind resolves each rule's handle in n's current table; call it after
// n.SetRules with this set's rules and before the set is published.
func (rs *Rules) Bind(n *pop.Node) {
	for _, cr := range rs.List {
		cr.Handle, _ = n.Handle(cr.Pop.Name)
	}
}

// Compile builds a Rules from a validated config. metricsFor returns
// the counters of a rule name.
func Compile(cfg *config.Config, metricsFor func(string) *RuleMetrics) (*Rules, []pop.Rule, error) {
	prules, err := cfg.PopRules()
	if err != nil {
		return nil, nil, err
	}
	trusted, err := config.ParsePrefixes(cfg.Proxy.TrustedProxies)
	if err != nil {
		return nil, nil, err
	}
	rs := &Rules{ByName: make(map[string]*Rule, len(prules)), Trusted: trusted, DenyStatus: cfg.ForwardAuth.DenyStatus,
		IdemHeader: http.CanonicalHeaderKey(cfg.Idempotency.Header)}
	for i, r := range cfg.Rules {
		pr := prules[i]
		cr := &Rule{
			Pop:      pr,
			Matcher:  NewMatcher(r.Match),
			policy:   PolicyField(pr, nil, 0),
			limitStr: strconv.FormatUint(pr.Limit, 10),
			MaxCost:  pr.MaxCost(),
			ruleJSON: string(AppendString(nil, pr.Name)),
			Metrics:  metricsFor(pr.Name),
		}
		cr.MaxCostStr = strconv.FormatUint(cr.MaxCost, 10)
		if !pr.Calendar.IsZero() {
			cr.cal = &calendarPolicy{}
		}
		for _, w := range pr.Windows() {
			cr.names = append(cr.names, `"`+policyName(pr, w.Window)+`"`)
			if len(pr.More) > 0 {
				cr.windowMS = append(cr.windowMS, strconv.FormatInt(w.Window.Milliseconds(), 10))
			}
		}
		if h, ok := strings.CutPrefix(r.Tier, config.KeyHeaderPrefix); ok {
			cr.tierHeader = http.CanonicalHeaderKey(h)
		}
		for _, k := range r.Key {
			switch {
			case k == config.KeyIP:
				cr.parts = append(cr.parts, keyPart{kind: partIP})
			case k == config.KeyPath:
				cr.parts = append(cr.parts, keyPart{kind: partPath, fold: r.Match.IgnoreCase})
			case k == config.KeyHost:
				cr.parts = append(cr.parts, keyPart{kind: partHost})
			default:
				cr.parts = append(cr.parts, keyPart{kind: partHeader, header: http.CanonicalHeaderKey(strings.TrimPrefix(k, config.KeyHeaderPrefix))})
			}
		}
		rs.List = append(rs.List, cr)
		rs.ByName[pr.Name] = cr
	}
	rs.Domains = compileDomains(cfg.RLS, rs.ByName)
	return rs, prules, nil
}

// PolicyField formats the rule as a RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers): one item per window,
// "name";q=<limit>;w=<window s>, the limits of limits (per window, as
// pop.Decision.Limits) or else the rule's own. Windows shorter than a
// second or not whole seconds round up. Items of a rule of several windows
// are named "name/<window>" (pop.WindowName), e.g. "api/1s", "api/1h". A
// calendar rule's w is the length of its period that holds now (Unix
// nanoseconds): 86400 for most days, 82800 or 90000 across a daylight-
// saving change, 2419200 to 2678400 for months.
func PolicyField(r pop.Rule, limits []uint64, now int64) string {
	var b strings.Builder
	for i, l := range r.Windows() {
		if i > 0 {
			b.WriteString(", ")
		}
		q := l.Limit
		if limits != nil {
			q = limits[i]
		}
		b.WriteString(`"` + policyName(r, l.Window) + `";q=` + strconv.FormatUint(q, 10))
		if r.Kind != pop.Concurrency { // requests in flight have no window
			w := int64(l.Window)
			if !r.Calendar.IsZero() {
				_, start, end := r.Calendar.PeriodOf(now)
				w = end - start
			}
			b.WriteString(";w=" + strconv.FormatInt(max(CeilDiv(w, 1e9), 1), 10))
		}
	}
	return b.String()
}

// policyName names a window's policy item: the rule's name, or for a rule
// of several windows "name/<window>", as its counts are named on the wire.
func policyName(r pop.Rule, w time.Duration) string { return r.WireName(w) }

func CeilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}
