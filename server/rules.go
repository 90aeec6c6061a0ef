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

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// ruleSet is an immutable snapshot of the compiled rules and proxy settings,
// swapped atomically on reload.
type ruleSet struct {
	rules   []*compiledRule // config order
	byName  map[string]*compiledRule
	trusted []netip.Prefix
	rls     *rlsTable // the rls section: descriptors to these rules
}

// compiledRule is a rule ready for the hot path: matchers parsed, header
// values preformatted, metrics resolved.
type compiledRule struct {
	cfg     config.Rule
	pop     pop.Rule
	methods []string
	host    string // lower case, no port
	prefix  string
	parts   []keyPart
	// policy is the RateLimit-Policy item: "name";q=100;w=60.
	policy string
	// limitStr is the limit in decimal, for X-RateLimit-Limit.
	limitStr string
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
	rs := &ruleSet{byName: make(map[string]*compiledRule, len(prules)), trusted: trusted}
	for i, r := range cfg.Rules {
		pr := prules[i]
		cr := &compiledRule{
			cfg:      r,
			pop:      pr,
			methods:  r.Match.Methods,
			host:     strings.ToLower(r.Match.Host),
			prefix:   r.Match.PathPrefix,
			policy:   policyItem(pr),
			limitStr: strconv.FormatUint(pr.Limit, 10),
			ruleJSON: string(appendString(nil, pr.Name)),
			m:        metricsFor(pr.Name),
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

// policyItem formats the rule as a RateLimit-Policy item
// (draft-ietf-httpapi-ratelimit-headers-10): "name";q=<limit>;w=<window s>.
// Windows shorter than a second or not whole seconds round up.
func policyItem(r pop.Rule) string {
	w := ceilDiv(int64(r.Window), 1e9)
	return `"` + r.Name + `";q=` + strconv.FormatUint(r.Limit, 10) + ";w=" + strconv.FormatInt(max(w, 1), 10)
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// matches reports whether the proxied request r falls under the rule.
func (cr *compiledRule) matches(r *http.Request) bool {
	if len(cr.methods) > 0 {
		ok := false
		for _, m := range cr.methods {
			if r.Method == m {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if cr.prefix != "" && !strings.HasPrefix(r.URL.Path, cr.prefix) {
		return false
	}
	if cr.host != "" && !strings.EqualFold(hostOnly(r.Host), cr.host) {
		return false
	}
	return true
}

// key builds the rule's key for r; ok is false when a part is missing (a
// header not sent), in which case the rule does not apply.
func (cr *compiledRule) key(r *http.Request, ip netip.Addr) (string, bool) {
	if len(cr.parts) == 1 {
		k := partValue(cr.parts[0], r, ip)
		if k == "" {
			return "", false
		}
		return boundKey(k), true
	}
	var b strings.Builder
	for i, p := range cr.parts {
		v := partValue(p, r, ip)
		if v == "" {
			return "", false
		}
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(v)
	}
	return boundKey(b.String()), true
}

func partValue(p keyPart, r *http.Request, ip netip.Addr) string {
	switch p.kind {
	case partIP:
		if !ip.IsValid() {
			return ""
		}
		return ip.String()
	case partHeader:
		return r.Header.Get(p.header)
	case partPath:
		return r.URL.Path
	case partHost:
		return strings.ToLower(hostOnly(r.Host))
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
