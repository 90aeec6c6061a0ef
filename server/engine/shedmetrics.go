package engine

import "github.com/prometheus/client_golang/prometheus"

var (
	descInFlight = prometheus.NewDesc("geolimit_in_flight",
		"Requests in flight in proxy mode and the middleware, from the start of their body read (up to 16 KiB of it) to the end of the response (shed requests not counted).", nil, nil)
	descShed = prometheus.NewDesc("geolimit_shed_total",
		"Requests shed (answered 503 before any rule counted them) by priority class of shedding.classes.", []string{"class"}, nil)
	descShedLevel = prometheus.NewDesc("geolimit_shed_level",
		"Priority classes shed at the current number of requests in flight, weighed by the latency against shedding.target_latency (0: none; at most the number of classes - 1).", nil, nil)
	descShedLatency = prometheus.NewDesc("geolimit_shed_latency_seconds",
		"Moving average of the time the requests that pass the rules take, arrival to the end of the response (kept while shedding.target_latency is set; 0 otherwise).", nil, nil)
	descShedClient = prometheus.NewDesc("geolimit_shed_client_total",
		"Requests shed (answered 503 before any rule counted them) because their client address (an IPv6 client's /64) held max(1, shedding.max_in_flight / 4) requests in flight already.", nil, nil)
	descShedMax = prometheus.NewDesc("geolimit_shed_max_in_flight",
		"shedding.max_in_flight: requests in flight at which every class but the first is shed (0: shedding off).", nil, nil)
)

// shedCollector exports the load shedder's count and counters at scrape
// time: the hot path only adds to atomics.
type shedCollector struct{ a *App }

func (c *shedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descShed, descShedLevel, descShedLatency, descShedMax, descShedClient} {
		ch <- d
	}
}

func (c *shedCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.a.shed.InFlight()
	p := c.a.shed.Policy()
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(descShedMax, prometheus.GaugeValue, float64(p.Max))
	ch <- prometheus.MustNewConstMetric(descShedLevel, prometheus.GaugeValue, float64(c.a.shed.Level()))
	ch <- prometheus.MustNewConstMetric(descShedLatency, prometheus.GaugeValue, c.a.shed.Latency().Seconds())
	ch <- prometheus.MustNewConstMetric(descShedClient, prometheus.CounterValue, float64(c.a.shed.ShedClient()))
	for i := range p.Classes {
		cl := &p.Classes[i]
		ch <- prometheus.MustNewConstMetric(descShed, prometheus.CounterValue, float64(cl.Shed.Load()), cl.Name)
	}
}
