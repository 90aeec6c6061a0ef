package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/config"
)

// metrics are the daemon's own metrics, beside the engine's on its
// registry: the decision latency of each front end, the proxy's upstream
// errors, the API's refusals and the listeners' refused connections.
type metrics struct {
	latencyCheck  prometheus.Observer
	latencyChecks prometheus.Observer
	latencyProxy  prometheus.Observer
	// latencyMiddleware is observed per request decided by the middleware
	// front end.
	latencyMiddleware prometheus.Observer
	// latencyForwardAuth is observed per decided forward-auth request.
	latencyForwardAuth prometheus.Observer
	latencyRLS         prometheus.Observer
	// latencySPOA is observed per geolimit-check message of HAProxy's.
	latencySPOA    prometheus.Observer
	upstreamErrors prometheus.Counter
	unauthMissing  prometheus.Counter
	unauthInvalid  prometheus.Counter
	// forbidden counts 403s by the scope missing, indexed by the scope's
	// bit (config.ScopeNames).
	forbidden [4]prometheus.Counter
}

var (
	descConnRefused = prometheus.NewDesc("geolimit_connections_refused_total",
		"Connections closed at once because their client address already held http.max_connections_per_client on that listener (the HAProxy agent's: see geolimit_spoa_connections_replaced_total).", nil, nil)
	descSPOAReplaced = prometheus.NewDesc("geolimit_spoa_connections_replaced_total",
		"HAProxy agent connections closed to make room for a newer one of the same client address, which held http.max_connections_per_client: its stalest (no HELLO first, else the longest without a frame).", nil, nil)
)

func newMetrics(a *App) *metrics {
	e := a.eng
	m := &metrics{
		latencyCheck:       e.Latency("check"),
		latencyChecks:      e.Latency("checks"),
		latencyProxy:       e.Latency("proxy"),
		latencyMiddleware:  e.Latency("middleware"),
		latencyForwardAuth: e.Latency("forward_auth"),
		latencyRLS:         e.Latency("rls"),
		latencySPOA:        e.Latency("spoa"),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "geolimit_proxy_upstream_errors_total",
			Help: "Proxied requests answered 502 because the upstream failed.",
		}),
	}
	unauth := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "geolimit_api_unauthorized_total",
		Help: "API requests answered 401 because api.token_file or api.tokens is set and they carried no bearer token (missing) or none of the tokens (invalid).",
	}, []string{"reason"})
	m.unauthMissing = unauth.WithLabelValues("missing")
	m.unauthInvalid = unauth.WithLabelValues("invalid")
	forbidden := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "geolimit_api_forbidden_total",
		Help: "API requests answered 403 because their token (of api.tokens) lacks the scope the endpoint needs.",
	}, []string{"scope"})
	for i, name := range config.ScopeNames() {
		m.forbidden[i] = forbidden.WithLabelValues(name)
	}
	a.reg.MustRegister(m.upstreamErrors, unauth, forbidden, &listenCollector{a: a})
	return m
}

// listenCollector exports the listeners' refused connections.
type listenCollector struct{ a *App }

func (c *listenCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConnRefused
	ch <- descSPOAReplaced
}

func (c *listenCollector) Collect(ch chan<- prometheus.Metric) {
	var refused uint64
	for _, l := range c.a.connCapsNow() {
		refused += l.Refused()
	}
	ch <- prometheus.MustNewConstMetric(descConnRefused, prometheus.CounterValue, float64(refused))
	ch <- prometheus.MustNewConstMetric(descSPOAReplaced, prometheus.CounterValue, float64(c.a.spoa.Replaced()))
}
