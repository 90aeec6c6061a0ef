package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sparseScenario is 8 PoPs of 2 nodes in two regions, 2000 Zipf keys on one
// global rule of 400 per 10s: a few keys far over their limit, most far
// below it. sparse sets replication.sparse_updates.
func sparseScenario(sparse bool) string {
	return gridScenario("sparse", 11, "30s", 2, 4, 2, fmt.Sprintf("{flush_interval: 50ms, sparse_updates: %t}", sparse),
		"{name: api, limit: 400, window: 10s}", "{rule: api, keys: 2000, spread: zipf, zipf_s: 1.05, rate: 4000/s}")
}

// Sparse updates cut what a node receives from other PoPs, and keep the
// fleet as accurate as publishing every change: the same over-limit peak,
// as many admits against the central limiter. (Every change is published
// for the first anti-entropy interval, 5s of the 30s, and anti-entropy
// re-sends every total all the same: 30% fewer entries in all.)
func TestSparseUpdatesCostAndAccuracy(t *testing.T) {
	accuracyTest(t)
	run := func(sparse bool) Report {
		res, err := Run(mustParse(t, sparseScenario(sparse)), Options{})
		require.NoError(t, err)
		return res.Report
	}
	dense, sparse := run(false), run(true)
	for _, r := range []struct {
		name string
		r    Report
	}{{"every change", dense}, {"sparse", sparse}} {
		t.Logf("%s: inbound %.0f entries/s %.0f messages/s; max a/l %.3f, over-limit %d, admitted %d (central %d)", r.name,
			r.r.Replication.NodeInboundEntriesPerS, r.r.Replication.NodeInboundMessagesPerS,
			r.r.MaxAdmittedRatio, r.r.OverLimitAdmits, r.r.Admitted, r.r.Central.Admitted)
	}
	require.NotZero(t, dense.Replication.NodeInboundEntriesPerS)
	assert.Less(t, sparse.Replication.NodeInboundEntriesPerS, 0.8*dense.Replication.NodeInboundEntriesPerS,
		"entries per node")
	assert.LessOrEqual(t, sparse.MaxAdmittedRatio, dense.MaxAdmittedRatio+0.02, "over-limit peak")
	assert.LessOrEqual(t, sparse.MaxAdmittedRatio, 1.10)
	assert.LessOrEqual(t, float64(sparse.OverLimitAdmits), float64(dense.OverLimitAdmits)*1.1+10, "over-limit admits")
	assert.GreaterOrEqual(t, float64(sparse.Admitted), 0.97*float64(sparse.Central.Admitted), "admitted vs central")
}
