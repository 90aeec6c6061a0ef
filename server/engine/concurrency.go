package engine

import "github.com/prometheus/client_golang/prometheus"

var (
	descConcInFlight = prometheus.NewDesc("geolimit_concurrency_in_flight",
		"Slots of a concurrency rule held by this node's leases (proxied requests in flight and API leases), summed over keys.", []string{"rule"}, nil)
	descLeases = prometheus.NewDesc("geolimit_concurrency_leases_total",
		"Concurrency leases by outcome: acquired, denied (no slot free, or no room for a lease: full too), released, expired (given back at lease_ttl).", []string{"outcome"}, nil)
	descLeasesHeld = prometheus.NewDesc("geolimit_concurrency_leases",
		"Concurrency leases held by this node.", nil, nil)
	descLeasesMax = prometheus.NewDesc("geolimit_concurrency_max_leases",
		"The cap of concurrency leases held, and of the PoP members' in-flight counts held (limits.max_keys / 4).", nil, nil)
	descMemberCounts = prometheus.NewDesc("geolimit_concurrency_member_counts",
		"In-flight counts of the PoP's members held (one per member and key).", nil, nil)
	descReplInflight = prometheus.NewDesc("geolimit_replication_in_flight_counts_total",
		"In-flight counts received from the PoP's members, by what was done with them.", []string{"result"}, nil)
)

// concCollector exports the concurrency rules' metrics. Their series are
// bounded: one per concurrency rule, and a fixed set of outcomes.
type concCollector struct{ a *App }

func (c *concCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConcInFlight, descLeases, descLeasesHeld, descLeasesMax, descMemberCounts, descReplInflight} {
		ch <- d
	}
}

func (c *concCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.node.Stats()
	for rule, n := range st.InFlight {
		ch <- prometheus.MustNewConstMetric(descConcInFlight, prometheus.GaugeValue, float64(n), rule)
	}
	s := st.Slots
	for _, o := range []struct {
		name string
		v    uint64
	}{{"acquired", s.Acquired}, {"denied", s.Denied}, {"released", s.Released}, {"expired", s.Expired}, {"full", s.Full}} {
		ch <- prometheus.MustNewConstMetric(descLeases, prometheus.CounterValue, float64(o.v), o.name)
	}
	ch <- prometheus.MustNewConstMetric(descLeasesHeld, prometheus.GaugeValue, float64(s.Leases))
	ch <- prometheus.MustNewConstMetric(descLeasesMax, prometheus.GaugeValue, float64(s.MaxLeases))
	ch <- prometheus.MustNewConstMetric(descMemberCounts, prometheus.GaugeValue, float64(s.PeerCounts))
	m := st.Applied.Inflight
	for _, o := range []struct {
		name string
		v    int
	}{{"merged", m.Merged}, {"unchanged", m.Unchanged}, {"refused", m.Refused}, {"clamped", m.Clamped}} {
		ch <- prometheus.MustNewConstMetric(descReplInflight, prometheus.CounterValue, float64(o.v), o.name)
	}
}
