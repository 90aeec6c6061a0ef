package frontend

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Origin is the request the rules judge: in proxy mode the request itself,
// in forward auth the request a trusted proxy describes. Both modes build
// one and decide it with the same rules and key extraction.
type Origin struct {
	Method string
	// Path is the URL path, decoded and cleaned (RulePath).
	Path string
	// Host is the Host, possibly with a port.
	Host string
	// Header holds the request's headers, for header:<Name> key parts and
	// the tier.
	Header http.Header
	// IP is the client's address (see ClientIP); invalid when unknown.
	IP netip.Addr
	// Trusted: the request came through a trusted proxy
	// (proxy.trusted_proxies), whose headers may name the tier.
	Trusted bool
	// Ambiguous names a header that a rule keys on and that the request
	// sends more than once: which value the upstream uses is not known, so
	// the request is refused rather than counted under one of them.
	Ambiguous string
	// shedKey is the client (ClientKey) the shedder counts the request
	// under while it is in flight (Shedder.Enter), when shedCounted.
	shedKey [16]byte
	// shedNet is its network (NetworkKey), counted with it.
	shedNet     [16]byte
	shedCounted bool
}

// ProxiedOrigin is the Origin of a request that reaches the proxy listener:
// its own method, path (see RulePath), host and headers, and the client
// address ClientIP finds.
func ProxiedOrigin(r *http.Request, trusted []netip.Prefix) Origin {
	ip, tr := ClientIP(r, trusted)
	return Origin{Method: r.Method, Path: RulePath(r.URL.Path), Host: r.Host, Header: r.Header, IP: ip, Trusted: tr}
}

// RulePath is the path the rules see: p with "." and ".." segments resolved
// and repeated slashes merged (a trailing slash kept), as nginx and most
// servers route it. Without it "/x/../api/v1" or "//api/v1" would reach
// /api/v1 upstream unmatched by a path_prefix /api rule. A path without
// such segments (nearly all) is returned as it is, with no allocation.
func RulePath(p string) string {
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

func partValue(p keyPart, o *Origin) string {
	switch p.kind {
	case partIP:
		if !o.IP.IsValid() {
			return ""
		}
		return o.IP.String()
	case partHeader:
		vs := o.Header[p.header]
		if len(vs) > 1 {
			o.Ambiguous = p.header
			return ""
		}
		if len(vs) == 0 {
			return ""
		}
		return vs[0]
	case partPath:
		if p.fold {
			return strings.ToLower(o.Path)
		}
		return o.Path
	case partHost:
		return strings.ToLower(HostOnly(o.Host))
	}
	return ""
}

// HostOnly is the host of hostport, without its port and brackets.
func HostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// ClientIP returns the client's address: the socket peer, or, when the peer
// is a trusted proxy, the rightmost address of X-Forwarded-For that is not a
// trusted proxy. An unparsable entry stops the walk at the trusted hop that
// reported it, so a spoofed or garbage header never names the client.
func ClientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	peer := parseHop(r.RemoteAddr)
	if !peer.IsValid() || !IsTrusted(peer, trusted) {
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
				if !IsTrusted(a, trusted) {
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

// IsTrusted reports whether a is in one of the trusted prefixes
// (proxy.trusted_proxies).
func IsTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
