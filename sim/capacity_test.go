package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// capacityScenario is pops PoPs of nodes nodes each in two regions, the same
// traffic per PoP on one global rule, far below its limit; sparse turns
// sparse updates on.
func capacityScenario(pops, nodes int, sparse bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: capacity\nseed: 3\nduration: 6s\ntopology:\n")
	for r := range 2 {
		fmt.Fprintf(&b, "  - {region: r%d, pops: [", r)
		for p := range pops / 2 {
			if p > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{name: r%dp%d, nodes: %d}", r, p, nodes)
		}
		b.WriteString("]}\n")
	}
	fmt.Fprintf(&b, `network:
  inter_pop: {latency: 10ms}
  inter_region: {latency: 60ms}
replication: {flush_interval: 50ms, sparse_updates: %t}
rules:
  - {name: api, limit: 100000, window: 10s}
traffic:
  - {rule: api, keys: 500, spread: zipf, zipf_s: 1.05, rate: %d/s}
`, sparse, 100*pops)
	return b.String()
}

// What one node receives from other PoPs grows with the number of PoPs and
// not with the number of nodes per PoP: each PoP publishes its totals once
// per flush interval (its members take turns to speak), whatever its size.
func TestInboundGrowsWithPoPsNotNodes(t *testing.T) {
	run := func(pops, nodes int, sparse bool) Replication {
		res, err := Run(mustParse(t, capacityScenario(pops, nodes, sparse)), Options{NoCentral: true})
		require.NoError(t, err)
		return res.Report.Replication
	}
	// Every change published: the messages are the flushes. With sparse
	// updates a PoP seldom publishes, and what its members send one each
	// (the start's sync requests, their parts of anti-entropy) weighs
	// more in the messages, not in the entries.
	one, three := run(4, 1, false), run(4, 3, false)
	t.Logf("4 PoPs x 1 node: %+v", one)
	t.Logf("4 PoPs x 3 nodes: %+v", three)
	require.NotZero(t, one.NodeInboundEntriesPerS)
	assert.InEpsilon(t, one.NodeInboundEntriesPerS, three.NodeInboundEntriesPerS, 0.15, "entries per node: not with nodes per PoP")
	assert.InEpsilon(t, one.NodeInboundBytesPerS, three.NodeInboundBytesPerS, 0.15, "bytes per node: not with nodes per PoP")
	assert.InEpsilon(t, one.NodeInboundMessagesPerS, three.NodeInboundMessagesPerS, 0.2, "messages per node: one speaker per flush slot")
	sparseOne, sparseThree := run(4, 1, true), run(4, 3, true)
	assert.Less(t, sparseOne.NodeInboundEntriesPerS, one.NodeInboundEntriesPerS/2, "far below their limits, keys are seldom published")
	assert.InEpsilon(t, sparseOne.NodeInboundEntriesPerS, sparseThree.NodeInboundEntriesPerS, 0.15, "sparse entries per node: not with nodes per PoP")

	eight := run(8, 3, false)
	t.Logf("8 PoPs x 3 nodes: %+v", eight)
	// Each node hears 7 PoPs instead of 3, each with the same traffic.
	grow := eight.NodeInboundEntriesPerS / three.NodeInboundEntriesPerS
	assert.Greater(t, grow, 1.5)
	assert.Less(t, grow, 7.0/3*1.2, "at most linear in the PoPs heard")
}

// TestInboundByKindAddsUp checks that the report's split of what a node
// receives by kind adds up to its totals, and names the kinds a fleet
// without region voices sends: PoP totals, heartbeats and the start's sync
// requests.
func TestInboundByKindAddsUp(t *testing.T) {
	res, err := Run(mustParse(t, capacityScenario(4, 2, true)), Options{NoCentral: true})
	require.NoError(t, err)
	r := res.Report.Replication
	var msgs, entries, bytes float64
	for _, by := range r.NodeInboundByKind {
		msgs += by.MessagesPerS
		entries += by.EntriesPerS
		bytes += by.BytesPerS
	}
	assert.InDelta(t, r.NodeInboundMessagesPerS, msgs, 0.01)
	assert.InDelta(t, r.NodeInboundEntriesPerS, entries, 0.01)
	assert.InDelta(t, r.NodeInboundBytesPerS, bytes, 0.01)
	for _, k := range []string{"delta", "heartbeat", "sync"} {
		assert.NotZero(t, r.NodeInboundByKind[k].MessagesPerS, k)
	}
	assert.Zero(t, r.NodeInboundByKind["heartbeat"].EntriesPerS, "heartbeats carry no counts")
	assert.NotContains(t, r.NodeInboundByKind, "region delta", "no region voices")
}
