package server

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/pop"
)

// proxyHandler is the reverse proxy: every applicable rule is checked (AND)
// before the request goes upstream. The request is classified into one
// check per applicable rule (classify.go) and decided all or nothing by the
// node's pipeline: a request denied by one enforce rule spends nothing of
// the others.
func (a *App) proxyHandler() (http.Handler, error) {
	up, err := url.Parse(a.cfg.Proxy.Upstream)
	if err != nil {
		return nil, err
	}
	pc := a.cfg.Proxy
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: pc.DialTimeout.D(), KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   pc.DialTimeout.D() + 3*time.Second,
		ResponseHeaderTimeout: pc.ResponseHeaderTimeout.D(),
		ExpectContinueTimeout: time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			if pc.PreserveHost {
				pr.Out.Host = pr.In.Host
			}
			// Keep the forwarded chain only from a trusted proxy; from anyone
			// else X-Forwarded-For starts afresh with the socket peer.
			if _, trusted := clientIP(pr.In, a.rules.Load().trusted); trusted {
				if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
					pr.Out.Header["X-Forwarded-For"] = slices.Clone(prior)
				}
			}
			pr.SetXForwarded()
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.met.upstreamErrors.Inc()
			a.log.Warn("upstream request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			writeError(w, http.StatusBadGateway, "upstream unavailable")
		},
		ErrorLog: nil,
	}
	return a.middleware(rp, a.met.latencyProxy), nil
}

// Middleware returns a handler that decides every request against the
// rules exactly as the proxy listener does, and passes the allowed ones to
// next instead of an upstream: the client address from the socket peer or,
// behind proxy.trusted_proxies, from X-Forwarded-For; every applicable rule
// checked (AND), nothing counted when one denies; shadow rules counted but
// never denying. An allowed request reaches next with the RateLimit headers
// of its binding rule already set on w; a denied one is answered 429 with
// Retry-After and a JSON body, and one that sends a header a rule keys on
// more than once is answered 400. Reloaded rules apply to the next request.
//
// Middleware may be called before Start; the counts then wait for Start to
// be replicated (and, without Start, are never forgotten by the tick loop).
//
// Its decisions are timed under the "middleware" label of
// geolimit_decision_seconds.
func (a *App) Middleware(next http.Handler) http.Handler {
	return a.middleware(next, a.met.latencyMiddleware)
}

// middleware is Middleware, timing decisions with lat.
func (a *App) middleware(next http.Handler, lat prometheus.Observer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.limit(w, r, lat) {
			next.ServeHTTP(w, r)
		}
	})
}

// limit decides r as a request to the proxy listener and answers it when
// it may not go on (400 for an ambiguous key header, 429 when denied). When
// it may, limit sets the binding rule's RateLimit headers on w and returns
// true.
func (a *App) limit(w http.ResponseWriter, r *http.Request, lat prometheus.Observer) bool {
	start := time.Now()
	rs := a.rules.Load()
	o := proxiedOrigin(r, rs.trusted)
	return a.answerOrigin(w, rs, &o, http.StatusTooManyRequests, start, lat)
}

// writeDenied answers a denied request with status and the denial's JSON
// body; the RateLimit headers (Retry-After among them) are already set.
func writeDenied(w http.ResponseWriter, status int, bind *compiledRule, d pop.Decision) {
	b := appendDenied(make([]byte, 0, 192), bind, d)
	w.Header()[hContentType] = jsonCT
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// ambiguousMsg is the 400 answer to a request that sends a header a rule
// keys on more than once.
func ambiguousMsg(header string) string {
	return header + ": sent more than once; a rule keys on it, so one value is needed"
}

// appendDenied appends the proxy's 429 body.
func appendDenied(b []byte, cr *compiledRule, d pop.Decision) []byte {
	b = append(b, `{"error":"rate limited","rule":`...)
	b = appendString(b, cr.pop.Name)
	b = append(b, `,"limit":`...)
	b = strconv.AppendUint(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendUint(b, d.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, ceilDiv(int64(d.Reset), int64(time.Millisecond)), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, ceilDiv(int64(d.RetryAfter), int64(time.Millisecond)), 10)
	b = appendGuards(b, d)
	if cr.windowMS != nil && int(d.Binding) < len(cr.windowMS) {
		b = append(b, `,"window_ms":`...)
		b = append(b, cr.windowMS[d.Binding]...)
	}
	return append(b, "}\n"...)
}
