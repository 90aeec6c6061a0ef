package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// ruleSet is an immutable snapshot of the compiled rules, the trusted
// proxies and the forward-auth deny status, swapped atomically on reload.
type ruleSet struct {
	rules   []*compiledRule // config order
	byName  map[string]*compiledRule
	trusted []netip.Prefix
	// denyStatus is forward_auth.deny_status.
	denyStatus int
	rls        *rlsTable // the rls section: descriptors to these rules
}

// compiledRule is a rule ready for the hot path: matchers parsed, header
// values preformatted, metrics resolved.
type compiledRule struct {
	cfg config.Rule
	pop pop.Rule
	// h is the node core's rule of the same snapshot (bind): every
	// decision goes through it, so a request or batch resolved against
	// this snapshot is decided against it whatever a reload swaps
	// meanwhile.
	h       pop.RuleHandle
	methods []string
	host    string // lower case, no port
	prefix  string
	parts   []keyPart
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
	// maxCost is the largest cost a request may name (pop.Rule.MaxCost),
	// and maxCostStr the same in decimal.
	maxCost    uint64
	maxCostStr string
	// tierHeader is the canonical header that names a request's tier in
	// proxy mode and forward auth (rule field tier); empty for none.
	tierHeader string
	// ruleJSON is the name as a JSON string.
	ruleJSON string
	m        *ruleMetrics
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
}

// ruleMetrics are one rule's decision counters, kept across reloads for as
// long as a rule of that name exists.
type ruleMetrics struct {
	allowed, denied, shadowDenied atomic.Uint64
	guards                        guardMetrics
}

func (m *ruleMetrics) record(d pop.Decision) {
	switch {
	case d.ShadowDenied:
		m.shadowDenied.Add(1)
	case d.Allowed:
		m.allowed.Add(1)
	default:
		m.denied.Add(1)
	}
	m.guards.record(d)
}

// bind resolves each rule's handle in n's current table; call it after
// n.SetRules with this set's rules and before the set is published.
func (rs *ruleSet) bind(n *pop.Node) {
	for _, cr := range rs.rules {
		cr.h, _ = n.Handle(cr.pop.Name)
	}
}

// compileRules builds a ruleSet from a validated config. metricsFor returns
// the counters of a rule name.
func compileRules(cfg *config.Config, metricsFor func(string) *ruleMetrics) (*ruleSet, []pop.Rule, error) {
	prules, err := cfg.PopRules()
	if err != nil {
		return nil, nil, err
	}
	trusted, err := config.ParsePrefixes(cfg.Proxy.TrustedProxies)
	if err != nil {
		return nil, nil, err
	}
	rs := &ruleSet{byName: make(map[string]*compiledRule, len(prules)), trusted: trusted, denyStatus: cfg.ForwardAuth.DenyStatus}
	for i, r := range cfg.Rules {
		pr := prules[i]
		cr := &compiledRule{
			cfg:      r,
			pop:      pr,
			methods:  r.Match.Methods,
			host:     strings.ToLower(r.Match.Host),
			prefix:   r.Match.PathPrefix,
			policy:   policyField(pr, nil),
			limitStr: strconv.FormatUint(pr.Limit, 10),
			maxCost:  pr.MaxCost(),
			ruleJSON: string(appendString(nil, pr.Name)),
			m:        metricsFor(pr.Name),
		}
		cr.maxCostStr = strconv.FormatUint(cr.maxCost, 10)
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
				cr.parts = append(cr.parts, keyPart{kind: partPath})
			case k == config.KeyHost:
				cr.parts = append(cr.parts, keyPart{kind: partHost})
			default:
				cr.parts = append(cr.parts, keyPart{kind: partHeader, header: http.CanonicalHeaderKey(strings.TrimPrefix(k, config.KeyHeaderPrefix))})
			}
		}
		rs.rules = append(rs.rules, cr)
		rs.byName[pr.Name] = cr
	}
	rs.rls = compileRLS(cfg.RLS, rs.byName)
	return rs, prules, nil
}

// policyField formats the rule as a RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers): one item per window,
// "name";q=<limit>;w=<window s>, the limits of limits (per window, as
// pop.Decision.Limits) or else the rule's own. Windows shorter than a
// second or not whole seconds round up. Items of a rule of several windows
// are named "name/<window>" (pop.WindowName), e.g. "api/1s", "api/1h".
func policyField(r pop.Rule, limits []uint64) string {
	var b strings.Builder
	for i, l := range r.Windows() {
		if i > 0 {
			b.WriteString(", ")
		}
		q := l.Limit
		if limits != nil {
			q = limits[i]
		}
		w := ceilDiv(int64(l.Window), 1e9)
		b.WriteString(`"` + policyName(r, l.Window) + `";q=` + strconv.FormatUint(q, 10) + ";w=" + strconv.FormatInt(max(w, 1), 10))
	}
	return b.String()
}

// policyName names a window's policy item: the rule's name, or for a rule
// of several windows "name/<window>", as its counts are named on the wire.
func policyName(r pop.Rule, w time.Duration) string { return r.WireName(w) }

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// origin is the request the rules judge: in proxy mode the request itself,
// in forward auth the request a trusted proxy describes. Both modes build
// one and decide it with the same rules and key extraction.
type origin struct {
	method string
	// path is the URL path, decoded.
	path string
	// host is the Host, possibly with a port.
	host string
	// header holds the request's headers, for header:<Name> key parts.
	header http.Header
	// ip is the client's address (see clientIP); invalid when unknown.
	ip netip.Addr
	// trusted: the request came through a trusted proxy
	// (proxy.trusted_proxies), whose headers may name the tier.
	trusted bool
	// ambiguous names a header that a rule keys on and that the request
	// sends more than once: which value the upstream uses is not known, so
	// the request is refused rather than counted under one of them.
	ambiguous string
}

// proxiedOrigin is the origin of a request that reaches the proxy listener:
// its own method, path (see rulePath), host and headers, and the client
// address clientIP finds.
func proxiedOrigin(r *http.Request, trusted []netip.Prefix) origin {
	ip, tr := clientIP(r, trusted)
	return origin{method: r.Method, path: rulePath(r.URL.Path), host: r.Host, header: r.Header, ip: ip, trusted: tr}
}

// rulePath is the path the rules see: p with "." and ".." segments resolved
// and repeated slashes merged (a trailing slash kept), as nginx and most
// servers route it. Without it "/x/../api/v1" or "//api/v1" would reach
// /api/v1 upstream unmatched by a path_prefix /api rule. A path without
// such segments (nearly all) is returned as it is, with no allocation.
func rulePath(p string) string {
	if !dirtyPath(p) {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for _, s := range segs {
		trailing = false
		switch s {
		case "", ".":
			trailing = true
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = true
		default:
			out = append(out, s)
		}
	}
	c := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		c += "/"
	}
	return c
}

// dirtyPath reports whether p (starting with '/') has an empty, "." or ".."
// segment before its end.
func dirtyPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		rest := p[i+1:]
		switch {
		case len(rest) > 0 && rest[0] == '/':
			return true
		case rest == "." || rest == ".." || strings.HasPrefix(rest, "./") || strings.HasPrefix(rest, "../"):
			return true
		}
	}
	return false
}

// matches reports whether the request o falls under the rule.
func (cr *compiledRule) matches(o *origin) bool {
	if len(cr.methods) > 0 {
		ok := false
		for _, m := range cr.methods {
			// Methods are case-sensitive in HTTP, but an upstream that
			// takes "post" for POST must not let "post" escape a POST rule.
			if o.method == m || strings.EqualFold(o.method, m) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if cr.prefix != "" && !strings.HasPrefix(o.path, cr.prefix) {
		return false
	}
	if cr.host != "" && !strings.EqualFold(hostOnly(o.host), cr.host) {
		return false
	}
	return true
}

func partValue(p keyPart, o *origin) string {
	switch p.kind {
	case partIP:
		if !o.ip.IsValid() {
			return ""
		}
		return o.ip.String()
	case partHeader:
		vs := o.header[p.header]
		if len(vs) > 1 {
			o.ambiguous = p.header
			return ""
		}
		if len(vs) == 0 {
			return ""
		}
		return vs[0]
	case partPath:
		return o.path
	case partHost:
		return strings.ToLower(hostOnly(o.host))
	}
	return ""
}

// boundKey replaces a key longer than the store accepts by "sha256:" and
// its hex digest, so that long paths or header values still get a key of
// their own.
func boundKey(k string) string {
	if len(k) <= crdt.MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// clientIP returns the client's address: the socket peer, or, when the peer
// is a trusted proxy, the rightmost address of X-Forwarded-For that is not a
// trusted proxy. An unparsable entry stops the walk at the trusted hop that
// reported it, so a spoofed or garbage header never names the client.
func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	peer := parseHop(r.RemoteAddr)
	if !peer.IsValid() || !isTrusted(peer, trusted) {
		return peer, false
	}
	xff := r.Header.Values("X-Forwarded-For")
	last := peer
	for v := len(xff) - 1; v >= 0; v-- {
		s := xff[v]
		for {
			var hop string
			if i := strings.LastIndexByte(s, ','); i >= 0 {
				hop, s = s[i+1:], s[:i]
			} else {
				hop, s = s, ""
			}
			hop = strings.TrimSpace(hop)
			if hop != "" {
				a := parseHop(hop)
				if !a.IsValid() {
					return last, true
				}
				if !isTrusted(a, trusted) {
					return a, true
				}
				last = a
			}
			if s == "" {
				break
			}
		}
	}
	return last, true
}

// parseHop parses "ip", "ip:port" or "[ipv6]:port"; IPv4-mapped IPv6
// addresses become IPv4 and zones are dropped.
func parseHop(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
