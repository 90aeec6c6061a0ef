package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/frontend"
)

// Forward auth: nginx auth_request, Traefik ForwardAuth and Caddy
// forward_auth ask listen.forward_auth, before they pass a request on,
// whether it may pass. The question is a request with no body, any method
// and any path; the request it asks about (the origin) is described by
// headers:
//
//	method   X-Forwarded-Method or X-Original-Method
//	URI      X-Forwarded-Uri or X-Original-URI (origin form: /path?query)
//	host     X-Forwarded-Host
//	client   X-Forwarded-For (walked from the right, as in proxy mode)
//
// The headers are believed only when the peer is in proxy.trusted_proxies;
// from any other peer the question itself is the origin: its method,
// path, Host and the peer's address, exactly as the proxy listener would
// judge it. The origin is then decided by the proxy mode's rules and key
// extraction (classify.go): match, key, AND, nothing spent on a denial,
// shadow rules.
//
// Both spellings of a property may be sent, but they must agree, and each
// header may appear once: a trusted proxy overwrites the headers of its own
// spelling, and a client that adds the other spelling (nginx's
// auth_request subrequest and Traefik pass every client header on) gets a
// 400 instead of a say in what is counted.
//
// Allowed: 200 with the RateLimit headers of the binding rule. Denied: the
// deny status (forward_auth.deny_status, 429 by default, or the request's
// X-Geolimit-Deny-Status, 400-499) with Retry-After, the RateLimit headers
// and the proxy's JSON body. X-Forwarded-Proto is not read: no rule
// matches on the scheme.

// Canonical names of the headers that describe the origin.
const (
	hFwdMethod  = "X-Forwarded-Method"
	hFwdURI     = "X-Forwarded-Uri"
	hFwdHost    = "X-Forwarded-Host"
	hOrigMethod = "X-Original-Method"
	hOrigURI    = "X-Original-Uri"
	hDenyStatus = "X-Geolimit-Deny-Status"
)

// headerName is the spelling of a header in messages.
var headerName = map[string]string{
	hFwdMethod: "X-Forwarded-Method", hFwdURI: "X-Forwarded-Uri", hFwdHost: "X-Forwarded-Host",
	hOrigMethod: "X-Original-Method", hOrigURI: "X-Original-URI", hDenyStatus: "X-Geolimit-Deny-Status",
}

// ForwardAuth returns the forward-auth handler (see the comment above).
func (f *FrontEnds) ForwardAuth() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rs := f.env.Rules.Load()
		o, status, msg := f.forwardedOrigin(r, rs)
		if msg != "" {
			frontend.WriteError(w, http.StatusBadRequest, msg)
			return
		}
		a := f.env.DecideOrigin(rs, &o, status, nil)
		defer a.Put()
		f.met.LatencyForwardAuth.Observe(time.Since(start).Seconds())
		if a.WriteHTTP(w) {
			w.WriteHeader(http.StatusOK)
		}
	})
}

// forwardedOrigin reads the origin a forward-auth request asks about and
// the status a denial answers with. A non-empty msg says what is wrong
// with the request (400); nothing has been counted then.
func (f *FrontEnds) forwardedOrigin(r *http.Request, rs *frontend.Rules) (o frontend.Origin, status int, msg string) {
	status = rs.DenyStatus
	if v, ok := r.Header[hDenyStatus]; ok {
		if status, msg = parseDenyStatus(v); msg != "" {
			return o, 0, msg
		}
	}
	ip, trusted := frontend.ClientIP(r, rs.Trusted)
	o = frontend.Origin{Method: r.Method, Path: r.URL.Path, Host: r.Host, Header: r.Header, IP: ip, Trusted: trusted}
	if !trusted {
		if len(r.Header[hFwdURI]) > 0 || len(r.Header[hOrigURI]) > 0 {
			f.warnUntrustedForwardAuth(r.RemoteAddr)
		}
		o.Path = frontend.RulePath(o.Path)
		return o, status, ""
	}
	method, msg := described(r.Header, hFwdMethod, hOrigMethod)
	if msg != "" {
		return o, 0, msg
	}
	if method != "" {
		if !frontend.IsToken(method) {
			return o, 0, "X-Forwarded-Method/X-Original-Method: " + strconv.Quote(method) + " is not an HTTP method"
		}
		o.Method = method
	}
	uri, msg := described(r.Header, hFwdURI, hOrigURI)
	if msg != "" {
		return o, 0, msg
	}
	if uri != "" {
		// nginx's $request_uri keeps a raw fragment that nginx itself routes
		// without: /api/x#/../../o is served as /api/x, so it is judged so.
		uri, _, _ = strings.Cut(uri, "#")
		u, err := url.ParseRequestURI(uri)
		if err != nil || !strings.HasPrefix(uri, "/") {
			return o, 0, "X-Forwarded-Uri/X-Original-URI: " + strconv.Quote(uri) + " is not a request URI such as /api/v1?page=2"
		}
		o.Path = u.Path
	}
	host, msg := described(r.Header, hFwdHost)
	if msg != "" {
		return o, 0, msg
	}
	if host != "" {
		if !frontend.IsHost(host) {
			return o, 0, "X-Forwarded-Host: " + strconv.Quote(host) + " is not a host[:port]"
		}
		o.Host = host
	}
	o.Path = frontend.RulePath(o.Path)
	return o, status, ""
}

// described returns the one value that the headers names (spellings of
// one property) give, "" when none is sent. A header sent twice or empty,
// or two spellings that disagree, are an error: the origin is ambiguous.
func described(h http.Header, names ...string) (val, msg string) {
	from := ""
	for _, n := range names {
		vs := h[n]
		switch {
		case len(vs) == 0:
			continue
		case len(vs) > 1:
			return "", headerName[n] + ": sent " + strconv.Itoa(len(vs)) + " times; want one value"
		case vs[0] == "":
			return "", headerName[n] + ": empty"
		case from != "" && vs[0] != val:
			return "", headerName[from] + " " + strconv.Quote(val) + " and " + headerName[n] + " " + strconv.Quote(vs[0]) + " disagree"
		}
		val, from = vs[0], n
	}
	return val, ""
}

// parseDenyStatus reads X-Geolimit-Deny-Status: one status, 400-499.
func parseDenyStatus(v []string) (int, string) {
	if len(v) != 1 {
		return 0, "X-Geolimit-Deny-Status: sent " + strconv.Itoa(len(v)) + " times; want one value"
	}
	s, err := strconv.Atoi(strings.TrimSpace(v[0]))
	if err != nil || s < config.MinDenyStatus || s > config.MaxDenyStatus {
		return 0, "X-Geolimit-Deny-Status: " + strconv.Quote(v[0]) + " is not a 4xx status (400-499)"
	}
	return s, ""
}

// warnUntrustedForwardAuth logs, once per process, that a peer outside
// proxy.trusted_proxies described a request: the usual sign of a proxy
// missing from the list, whose requests then all count as its own.
func (f *FrontEnds) warnUntrustedForwardAuth(peer string) {
	if f.fwdWarned.CompareAndSwap(false, true) {
		f.env.Log.Warn("forward auth: a peer outside proxy.trusted_proxies sent X-Forwarded-Uri or X-Original-URI; "+
			"such headers are ignored and the request line and the peer's address are judged instead; "+
			"add the proxy's address to proxy.trusted_proxies (logged once)", "peer", peer)
	}
}
