package engine

import "github.com/prometheus/client_golang/prometheus"

var (
	descRepeats = prometheus.NewDesc("geolimit_idempotent_repeats_total",
		"Decisions that repeated one remembered for an idempotency key, counting nothing (also in geolimit_decisions_total).", []string{"rule"}, nil)
	descMemos = prometheus.NewDesc("geolimit_idempotency_keys",
		"Decisions remembered for idempotency keys (those over until the next sweep included).", nil, nil)
	descMemosMax = prometheus.NewDesc("geolimit_idempotency_max_keys",
		"The cap of decisions remembered for idempotency keys (idempotency.max_keys).", nil, nil)
	descMemosEvicted = prometheus.NewDesc("geolimit_idempotency_evicted_keys_total",
		"Decisions for idempotency keys forgotten before their ttl to make room, or not remembered for want of it.", nil, nil)
	descReplMemos = prometheus.NewDesc("geolimit_replication_idempotency_keys_total",
		"Remembered decisions received from the PoP's members, by what was done with them.", []string{"result"}, nil)
)

// idemCollector exports the idempotency key metrics.
type idemCollector struct{ a *App }

func (c *idemCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRepeats, descMemos, descMemosMax, descMemosEvicted, descReplMemos} {
		ch <- d
	}
}

func (c *idemCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cr := range c.a.rules.Load().List {
		ch <- prometheus.MustNewConstMetric(descRepeats, prometheus.CounterValue, float64(cr.Metrics.Repeats.Load()), cr.Pop.Name)
	}
	st := c.a.node.Stats()
	ch <- prometheus.MustNewConstMetric(descMemos, prometheus.GaugeValue, float64(st.Memos.Len))
	ch <- prometheus.MustNewConstMetric(descMemosMax, prometheus.GaugeValue, float64(st.Memos.Max))
	ch <- prometheus.MustNewConstMetric(descMemosEvicted, prometheus.CounterValue, float64(st.Memos.Evicted+st.Memos.Refused))
	m := st.Applied.Memos
	for _, o := range []struct {
		name string
		v    int
	}{{"merged", m.Merged}, {"unchanged", m.Unchanged}, {"expired", m.Expired}, {"refused", m.Refused}, {"clamped", m.Clamped}} {
		ch <- prometheus.MustNewConstMetric(descReplMemos, prometheus.CounterValue, float64(o.v), o.name)
	}
}
