package engine

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/geolimit/geolimit/pop"
)

// metrics are the App's Prometheus metrics, on the App's own registry.
//
// Decision counters are plain atomics per rule (see ruleMetrics), exported by
// a collector at scrape time, so the hot path does no label lookup; key
// counts come from node.Stats at scrape time.
type metrics struct {
	reloads *prometheus.CounterVec
	// latency is geolimit_decision_duration_seconds by endpoint (Latency).
	latency *prometheus.HistogramVec
}

var (
	descDecisions = prometheus.NewDesc("geolimit_decisions_total",
		"Decisions by rule and result (allowed, denied, shadow_denied, off: admitted unchecked while the rule is switched off).", []string{"rule", "result"}, nil)
	descActiveKeys = prometheus.NewDesc("geolimit_active_keys",
		"Live keys per rule.", []string{"rule"}, nil)
	descMaxKeys = prometheus.NewDesc("geolimit_store_max_keys",
		"The store's cap on live (rule, key) pairs (limits.max_keys): geolimit_store_keys over this is the store's fill.", nil, nil)
	descKeys = prometheus.NewDesc("geolimit_store_keys",
		"Live (rule, key) pairs in the store.", nil, nil)
	descEvicted = prometheus.NewDesc("geolimit_store_evicted_keys_total",
		"Keys evicted to make room for a new key.", nil, nil)
	descUntracked = prometheus.NewDesc("geolimit_store_untracked_keys_total",
		"New keys (or merged entries) refused because the store was full: decided as keys with no history and not counted.", nil, nil)
	descExpired = prometheus.NewDesc("geolimit_store_expired_keys_total",
		"Keys removed because all their windows had passed.", nil, nil)
	descReplicas = prometheus.NewDesc("geolimit_store_replicas",
		"Replica identities known to the store, this node included.", nil, nil)
	descHotKeys = prometheus.NewDesc("geolimit_store_hot_keys",
		"Keys near their limit or denied, holding per-key state: the near-limit allowance's, and what this node denied of them (bounded).", nil, nil)
	descAllowHorizon = prometheus.NewDesc("geolimit_allowance_horizon_seconds",
		"Near-limit allowance: how long after a flush every other node holds its counts, as measured (0: off).", []string{"scope"}, nil)
	descAllowReplicas = prometheus.NewDesc("geolimit_allowance_replicas",
		"Near-limit allowance: nodes that may admit a key, this one included (0: off).", []string{"scope"}, nil)
	descApplied = prometheus.NewDesc("geolimit_replication_applied_entries_total",
		"Replicated entries received, by what merging them did.", []string{"outcome"}, nil)
	descClamped = prometheus.NewDesc("geolimit_replication_clamped_entries_total",
		"Replicated counts above their rule's limit (more than one replica can admit in a window), merged as the limit: a faulty or hostile peer.", nil, nil)
	descPartition = prometheus.NewDesc("geolimit_partition_active",
		"1 while some PoP is unheard (or shares are still held after a heal), else 0.", nil, nil)
	descEnforcingShare = prometheus.NewDesc("geolimit_rule_enforcing_share",
		"1 while the rule limits this side of a partition to its share (on_partition: share), else 0.", []string{"rule"}, nil)
	descMeanShare = prometheus.NewDesc("geolimit_rule_mean_share",
		"Mean share of the limit this side may spend, over the rule's keys with a pre-cut share (1 outside partitions).", []string{"rule"}, nil)
)

func newMetrics(a *App) *metrics {
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "geolimit_decision_duration_seconds",
		Help: "Time to decide one request: for the API from reading the body to the response written; for the proxy (and the Go middleware, endpoint=\"middleware\") until the decision is made (upstream excluded); for forward auth until the answer is written; for the rate limit service (rls) from the decoded request to the response built; for the HAProxy agent (spoa) from the decoded message to the answer built. A /v1/checks batch and a ShouldRateLimit request are one observation each; /v1/check is sampled 1 in 8.",
		// 2us .. ~16ms
		Buckets: prometheus.ExponentialBuckets(2e-6, 2, 14),
	}, []string{"endpoint"})
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geolimit_config_reloads_total",
			Help: "Config reloads by result (ok, failed, refused: it would remove half or more of the rules without allow_rule_removal).",
		}, []string{"result"}),
		latency: lat,
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	m.reloads.WithLabelValues("refused")
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "geolimit_build_info",
		Help: "Build and identity of this node; always 1.",
		ConstLabels: prometheus.Labels{
			"version": a.opts.Version, "goversion": runtime.Version(),
			"region": a.opts.Self.Region, "pop": a.opts.Self.PoP, "node": a.opts.Self.Node,
		},
	})
	build.Set(1)
	a.reg.MustRegister(m.reloads, lat, build, &nodeCollector{a: a}, &guardCollector{a: a}, &idemCollector{a: a}, &modeCollector{a: a}, &shedCollector{a: a}, &concCollector{a: a},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Latency returns the observer of geolimit_decision_duration_seconds for
// one endpoint (a front end: "check", "proxy", "middleware", ...), creating
// its series.
func (a *App) Latency(endpoint string) prometheus.Observer {
	return a.met.latency.WithLabelValues(endpoint)
}

// nodeCollector exports the decision counters and the node's Stats.
type nodeCollector struct{ a *App }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descActiveKeys, descKeys, descMaxKeys, descEvicted, descUntracked, descExpired, descReplicas, descHotKeys, descAllowHorizon, descAllowReplicas, descApplied, descClamped, descPartition, descEnforcingShare, descMeanShare} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cr := range c.a.rules.Load().List {
		n, m := cr.Pop.Name, cr.Metrics
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(m.Allowed.Load()), n, "allowed")
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(m.Denied.Load()), n, "denied")
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(m.ShadowDenied.Load()), n, "shadow_denied")
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(m.Off.Load()), n, "off")
	}
	st := c.a.node.Stats()
	for rule, k := range st.KeysByRule {
		ch <- prometheus.MustNewConstMetric(descActiveKeys, prometheus.GaugeValue, float64(k), rule)
	}
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(st.Store.Keys))
	ch <- prometheus.MustNewConstMetric(descMaxKeys, prometheus.GaugeValue, float64(c.a.cfg.Limits.MaxKeys))
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(st.Store.Evicted))
	ch <- prometheus.MustNewConstMetric(descUntracked, prometheus.CounterValue, float64(st.Store.Overflow))
	ch <- prometheus.MustNewConstMetric(descExpired, prometheus.CounterValue, float64(st.Store.Expired))
	ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(st.Store.Replicas))
	ch <- prometheus.MustNewConstMetric(descHotKeys, prometheus.GaugeValue, float64(st.Store.HotKeys))
	for _, sc := range []pop.Scope{pop.ScopePoP, pop.ScopeGlobal} {
		a := c.a.node.Link().AllowanceOf(sc)
		ch <- prometheus.MustNewConstMetric(descAllowHorizon, prometheus.GaugeValue, a.Horizon.Seconds(), sc.String())
		replicas := 0
		if a != (pop.Allowance{}) {
			replicas = a.Replicas()
		}
		ch <- prometheus.MustNewConstMetric(descAllowReplicas, prometheus.GaugeValue, float64(replicas), sc.String())
	}
	ap := st.Applied
	for _, o := range []struct {
		name string
		v    int
	}{
		{"merged", ap.Merged}, {"unchanged", ap.Unchanged}, {"stale", ap.Stale}, {"ahead", ap.Ahead},
		{"full", ap.Full}, {"unknown_rule", ap.UnknownRule}, {"wrong_scope", ap.WrongScope},
		{"bad_entry", ap.BadEntry}, {"echo", ap.Echo},
	} {
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(o.v), o.name)
	}
	ch <- prometheus.MustNewConstMetric(descClamped, prometheus.CounterValue, float64(ap.Clamped))
	ps := c.a.node.Partition(c.a.clk.Now())
	ch <- prometheus.MustNewConstMetric(descPartition, prometheus.GaugeValue, b2f(ps.Partitioned))
	for _, r := range ps.Rules {
		share := 1.0
		if r.EnforcingShare {
			share = r.MeanShare
		}
		ch <- prometheus.MustNewConstMetric(descEnforcingShare, prometheus.GaugeValue, b2f(r.EnforcingShare), r.Rule)
		ch <- prometheus.MustNewConstMetric(descMeanShare, prometheus.GaugeValue, share, r.Rule)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
