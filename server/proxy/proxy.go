// Package proxy is the daemon's HTTP front ends that judge whole requests:
// the reverse proxy (listen.proxy), forward auth for nginx, Traefik and
// Caddy (listen.forward_auth) and the net/http middleware. Each turns the
// request into an origin, classifies it into checks (one per applicable
// rule) and lets the node's pipeline decide them all or nothing
// (frontend.Env.DecideOrigin) and writes its answer
// (frontend.Answer.WriteHTTP). Proxy mode and the middleware first pass the
// node's load shedder (frontend.Shedder): past its thresholds a request of a
// low priority class is answered 503 before any rule sees it. Forward auth
// sheds nothing: it holds no request in flight.
package proxy

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/frontend"
)

// Metrics are the front ends' own metrics; nil observers observe nothing.
type Metrics struct {
	// LatencyProxy, LatencyMiddleware and LatencyForwardAuth observe each
	// decision of their front end, in seconds.
	LatencyProxy, LatencyMiddleware, LatencyForwardAuth prometheus.Observer
	// UpstreamErrors counts proxied requests the upstream failed.
	UpstreamErrors prometheus.Counter
}

// FrontEnds serves proxy mode, forward auth and the middleware of one
// node. Safe for concurrent use.
type FrontEnds struct {
	env frontend.Env
	met Metrics
	// fwdWarned is set once an untrusted forward-auth peer was logged.
	fwdWarned atomic.Bool
}

// New returns the front ends of env's node and rules.
func New(env frontend.Env, met Metrics) *FrontEnds {
	for _, o := range []*prometheus.Observer{&met.LatencyProxy, &met.LatencyMiddleware, &met.LatencyForwardAuth} {
		if *o == nil {
			*o = prometheus.ObserverFunc(func(float64) {})
		}
	}
	if met.UpstreamErrors == nil {
		met.UpstreamErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "geolimit_upstream_errors_total"})
	}
	return &FrontEnds{env: env, met: met}
}

// Proxy returns the reverse proxy to pc.Upstream: every applicable rule is checked (AND)
// before the request goes upstream. The request is classified into one
// check per applicable rule (classify.go) and decided all or nothing by the
// node's pipeline: a request denied by one enforce rule spends nothing of
// the others.
func (f *FrontEnds) Proxy(pc config.Proxy) (http.Handler, error) {
	up, err := url.Parse(pc.Upstream)
	if err != nil {
		return nil, err
	}
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
			if _, trusted := frontend.ClientIP(pr.In, f.env.Rules.Load().Trusted); trusted {
				if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
					pr.Out.Header["X-Forwarded-For"] = slices.Clone(prior)
				}
			}
			pr.SetXForwarded()
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.met.UpstreamErrors.Inc()
			f.env.Log.Warn("upstream request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			frontend.WriteError(w, http.StatusBadGateway, "upstream unavailable")
		},
		ErrorLog: nil,
	}
	return f.middleware(rp, f.met.LatencyProxy), nil
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
// The node's load shedder goes first (see middleware below).
//
// Middleware may be called before Start; the counts then wait for Start to
// be replicated (and, without Start, are never forgotten by the tick loop).
//
// Its decisions are timed under the "middleware" label of
// geolimit_decision_seconds.
func (f *FrontEnds) Middleware(next http.Handler) http.Handler {
	return f.middleware(next, f.met.LatencyMiddleware)
}

// middleware is Middleware, timing decisions with lat. The node's load
// shedder (frontend.Shedder) goes first: a shed request is answered 503
// before any rule counts it; one that goes on counts in flight from when
// the start of its body is read (frontend.PreReadBody) until next returns (its response written, the client gone or the upstream
// failed). An allowed request holds the slots of the concurrency rules
// that apply while next serves it: they are given back when next returns,
// however the request ends (a panic too).
func (f *FrontEnds) middleware(next http.Handler, lat prometheus.Observer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rs := f.env.Rules.Load()
		o := frontend.ProxiedOrigin(r, rs.Trusted)
		passed := false
		if sh := f.env.Shed; sh != nil {
			// The request counts in flight once its work starts: a client
			// trickling its body holds no place (frontend.PreReadBody).
			if err := frontend.PreReadBody(r, frontend.PreReadBytes); err != nil {
				frontend.WriteError(w, http.StatusBadRequest, "request body: "+err.Error())
				return
			}
			if c := sh.Enter(&o); c != nil {
				frontend.WriteShed(w, c)
				return
			}
			t0 := f.env.Clock.Now()
			defer func() { sh.Exit(&o, f.env.Clock.Now()-t0, passed) }()
		}
		// 400 for an ambiguous key header, 429 when denied; when it may go
		// on, the binding rule's RateLimit headers are set on w and the
		// concurrency slots taken are in held.
		var held frontend.Held
		a := f.env.DecideOrigin(rs, &o, http.StatusTooManyRequests, &held)
		lat.Observe(time.Since(start).Seconds())
		passed = a.WriteHTTP(w)
		a.Put()
		if !passed {
			return
		}
		if !held.Empty() {
			defer func() { held.Release(f.env.Node, f.env.Clock.Now()) }()
		}
		next.ServeHTTP(w, r)
	})
}
