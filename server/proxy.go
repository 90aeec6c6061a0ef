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
// before the request goes upstream.
//
// Counting across several rules: a request denied by one enforce rule must
// not spend the budget of the others. When two or more enforce rules apply,
// each is first checked without counting (node.View and the window maths);
// if any would deny, the request is denied and nothing is counted anywhere.
// Otherwise the enforce rules are decided (counted) in config order, and then
// the shadow rules. Only a race (another request taking the last unit between
// the check and the decision) can make a later rule deny after earlier rules
// counted; the request is still denied.
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
	bind, d, denied := a.decideRules(rs, &o)
	lat.Observe(time.Since(start).Seconds())
	if o.ambiguous != "" {
		writeError(w, http.StatusBadRequest, ambiguousMsg(o.ambiguous))
		return false
	}
	if bind.cr != nil {
		setRateLimitHeaders(w.Header(), bind.cr, d, a.moreAfter(bind, d))
	}
	if denied {
		writeDenied(w, http.StatusTooManyRequests, bind.cr, d)
		return false
	}
	return true
}

// writeDenied answers a denied request with status and the denial's JSON
// body; the RateLimit headers (Retry-After among them) are already set.
func writeDenied(w http.ResponseWriter, status int, bind *compiledRule, d pop.Decision) {
	b := appendDenied(make([]byte, 0, 192), bind, d)
	w.Header()[hContentType] = jsonCT
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

type applied struct {
	cr   *compiledRule
	key  string
	tier string // the request's tier (rule field tier); empty for none
}

// ambiguousMsg is the 400 answer to a request that sends a header a rule
// keys on more than once.
func ambiguousMsg(header string) string {
	return header + ": sent more than once; a rule keys on it, so one value is needed"
}

// decideRules decides the request o against every applicable rule of rs,
// for proxy mode and forward auth alike. It returns the binding rule (with
// the key and tier it was decided for) and its decision (the denying rule with the longest wait, or the enforce rule
// with the least remaining; nil when no enforce rule applies), and whether
// o is denied. A request that sends a header a rule keys on more than once
// (o.ambiguous) counts nothing; the caller refuses it.
func (a *App) decideRules(rs *ruleSet, o *origin) (applied, pop.Decision, bool) {
	var buf [8]applied
	app := buf[:0]
	enforce := 0
	for _, cr := range rs.rules {
		if !cr.matches(o) {
			continue
		}
		k, ok := cr.key(o)
		if !ok {
			continue
		}
		app = append(app, applied{cr, k, cr.tier(o)})
		if cr.pop.Mode == pop.Enforce {
			enforce++
		}
	}
	if o.ambiguous != "" {
		return applied{}, pop.Decision{}, true // refused by the caller; nothing counted
	}
	now := a.clk.Now()
	var bind applied
	var bd pop.Decision
	if enforce >= 2 {
		// Check every enforce rule without counting; deny on the first
		// that would deny, so that no rule's budget is spent.
		for _, ap := range app {
			if ap.cr.pop.Mode != pop.Enforce {
				continue
			}
			if d, ok := a.peek(now, ap); ok && !d.Allowed {
				a.node.Penalize(now, ap.cr.pop.Name, ap.key, &d)
				ap.cr.m.record(d)
				if bind.cr == nil || d.RetryAfter > bd.RetryAfter {
					bind, bd = ap, d
				}
			}
		}
		if bind.cr != nil {
			return bind, bd, true
		}
	}
	for pass := 0; pass < 2; pass++ { // enforce rules first, then shadow rules
		for _, ap := range app {
			if (ap.cr.pop.Mode == pop.Enforce) != (pass == 0) {
				continue
			}
			d, err := a.decideTier(now, ap.cr, ap.key, ap.tier, ap.cr.pop.Cost, true)
			if err != nil {
				continue // the rule went away in a reload
			}
			ap.cr.m.record(d)
			if ap.cr.pop.Mode != pop.Enforce {
				continue
			}
			if !d.Allowed {
				return ap, d, true
			}
			if bind.cr == nil || d.Remaining < bd.Remaining || (d.Remaining == bd.Remaining && d.Reset > bd.Reset) {
				bind, bd = ap, d
			}
		}
	}
	return bind, bd, false
}

// peek decides a request of the rule's cost for the applied rule's key
// and tier at now without counting it.
func (a *App) peek(now int64, ap applied) (pop.Decision, bool) {
	d, err := a.decideTier(now, ap.cr, ap.key, ap.tier, ap.cr.pop.Cost, false)
	return d, err == nil
}

// moreAfter is the RateLimit field's t for the binding rule's decision d
// (pop.Node.MoreAfter): an admitted request looks its key up once more.
func (a *App) moreAfter(ap applied, d pop.Decision) time.Duration {
	return a.node.MoreAfterHandle(a.clk.Now(), ap.cr.h, ap.key, d, pop.Options{Tier: ap.tier})
}

// tier returns the request's tier for the rule: the value of its tier
// header, or empty (the default tier) when the rule reads none or the
// request sends it not exactly once.
func (cr *compiledRule) tier(o *origin) string {
	if cr.tierHeader == "" {
		return ""
	}
	if vs := o.header[cr.tierHeader]; len(vs) == 1 {
		return vs[0]
	}
	return ""
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
