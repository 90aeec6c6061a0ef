package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/pop"
)

// The penalty box (block_for) and failing closed (on_unsure) as the daemon
// reports them: metrics.

var (
	descBlocks = prometheus.NewDesc("geolimit_blocks_total",
		"Keys this node put in a rule's penalty box (block_for): denials that started a block (shadow rules: would have).", []string{"rule"}, nil)
	descBlockedDenials = prometheus.NewDesc("geolimit_blocked_denials_total",
		"Requests denied (shadow rules: that would have been) because their key was in the rule's penalty box.", []string{"rule"}, nil)
	descUnsureDenials = prometheus.NewDesc("geolimit_unsure_denials_total",
		"Requests a rule with on_unsure: deny denied (shadow rules: would have) because the node could not know the key's count, by reason (store_full, not_synced, no_history).", []string{"rule", "reason"}, nil)
	descBlocksHeld = prometheus.NewDesc("geolimit_blocks_held",
		"Penalty blocks held by this node, set here or learnt from peers (ended ones until the next sweep).", nil, nil)
	descBlocksRefused = prometheus.NewDesc("geolimit_blocks_refused_total",
		"New penalty blocks dropped because the block table was full (its cap is limits.max_keys).", nil, nil)
	descReplBlocks = prometheus.NewDesc("geolimit_replication_blocks_total",
		"Replicated penalty blocks received, by what merging them did (merged, unchanged, expired, ignored: the rule has no block_for here, full).", []string{"outcome"}, nil)
	descReplBlocksClamped = prometheus.NewDesc("geolimit_replication_clamped_blocks_total",
		"Replicated penalty blocks ending later than now + block_for + max skew, merged as ending then: a faulty or hostile peer, or a longer block_for there.", nil, nil)
)

// guardCollector exports the penalty-box and unsure metrics.
type guardCollector struct{ a *App }

func (c *guardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBlocks, descBlockedDenials, descUnsureDenials, descBlocksHeld, descBlocksRefused, descReplBlocks, descReplBlocksClamped} {
		ch <- d
	}
}

func (c *guardCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cr := range c.a.rules.Load().List {
		n, g := cr.Pop.Name, &cr.Metrics.Guards
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.CounterValue, float64(g.Blocks.Load()), n)
		ch <- prometheus.MustNewConstMetric(descBlockedDenials, prometheus.CounterValue, float64(g.BlockedDenials.Load()), n)
		for _, u := range pop.UnsureReasons() {
			ch <- prometheus.MustNewConstMetric(descUnsureDenials, prometheus.CounterValue, float64(g.Unsure[u&3].Load()), n, u.String())
		}
	}
	st := c.a.node.Stats()
	ch <- prometheus.MustNewConstMetric(descBlocksHeld, prometheus.GaugeValue, float64(st.Blocks))
	ch <- prometheus.MustNewConstMetric(descBlocksRefused, prometheus.CounterValue, float64(st.BlocksFull))
	b := st.Applied.Blocks
	for _, o := range []struct {
		name string
		v    int
	}{{"merged", b.Merged}, {"unchanged", b.Unchanged}, {"expired", b.Expired}, {"ignored", b.Ignored}, {"full", b.Full}} {
		ch <- prometheus.MustNewConstMetric(descReplBlocks, prometheus.CounterValue, float64(o.v), o.name)
	}
	ch <- prometheus.MustNewConstMetric(descReplBlocksClamped, prometheus.CounterValue, float64(b.Clamped))
}
