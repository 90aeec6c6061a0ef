package server

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/pop"
)

// The penalty box (block_for) and failing closed (on_unsure) as the daemon
// reports them: answer fields and metrics.

// guardMetrics are one rule's penalty-box and unsure counters.
type guardMetrics struct {
	blocks, blockedDenials atomic.Uint64
	unsure                 [4]atomic.Uint64 // by pop.Unsure
}

func (g *guardMetrics) record(d pop.Decision) {
	switch {
	case d.BlockStarted:
		g.blocks.Add(1)
	case d.Blocked:
		g.blockedDenials.Add(1)
	case d.Unsure != pop.UnsureNone:
		g.unsure[d.Unsure&3].Add(1)
	}
}

// appendGuards appends the answer fields of a blocked or unsure decision:
// "blocked":true, "blocked_until_ms" (Unix milliseconds) and
// "unsure":"<reason>". Other decisions get none.
func appendGuards(b []byte, d pop.Decision) []byte {
	if d.Blocked {
		b = append(b, `,"blocked":true`...)
	}
	if d.Unsure != pop.UnsureNone {
		b = append(b, `,"unsure":"`...)
		b = append(b, d.Unsure.String()...)
		b = append(b, '"')
	}
	return b
}

// blockedUntilFields are the penalty-box fields of GET /v1/keys.
type blockedUntilFields struct {
	// BlockedUntil is RFC 3339 (UTC, nanoseconds); absent when not blocked.
	BlockedUntil string `json:"blocked_until,omitempty"`
	// BlockedUntilMS is Unix milliseconds; absent when not blocked.
	BlockedUntilMS int64 `json:"blocked_until_ms,omitempty"`
}

func blockedUntil(until int64) blockedUntilFields {
	if until == 0 {
		return blockedUntilFields{}
	}
	return blockedUntilFields{
		BlockedUntil:   time.Unix(0, until).UTC().Format(time.RFC3339Nano),
		BlockedUntilMS: ceilDiv(until, int64(time.Millisecond)),
	}
}

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
	for _, cr := range c.a.rules.Load().rules {
		n, g := cr.pop.Name, &cr.m.guards
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.CounterValue, float64(g.blocks.Load()), n)
		ch <- prometheus.MustNewConstMetric(descBlockedDenials, prometheus.CounterValue, float64(g.blockedDenials.Load()), n)
		for _, u := range pop.UnsureReasons() {
			ch <- prometheus.MustNewConstMetric(descUnsureDenials, prometheus.CounterValue, float64(g.unsure[u&3].Load()), n, u.String())
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
