package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLimitersUnderAPartition: a global gcra rule and a pop-scope
// concurrency rule side by side while the regions are cut apart. The report
// gives each rule its own figures. The gcra rule's sides pace on their own
// (at most sides x (limit + burst)); the concurrency rule's counts never
// leave its PoP, so the cut changes nothing for it: it admits what the
// central node admits, give or take a request, and holds at most one
// request over its limit per node of the PoP (two nodes may both take the
// last slot within a flush interval).
func TestLimitersUnderAPartition(t *testing.T) {
	sc, err := Load("../scenarios/limiters-partition.yaml")
	require.NoError(t, err)
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	require.Len(t, sc.Rules, 2)
	pace, uploads := sc.Rules[0], sc.Rules[1]
	for i, p := range r.Phases {
		require.Len(t, p.Rules, 2, p.Name)
		c := r.Central.Phases[i]
		require.Len(t, c.Rules, 2, p.Name)
		gp, up := p.Rules[0], p.Rules[1]
		assert.Equal(t, pace.Name, gp.Rule)
		assert.Equal(t, uploads.Name, up.Rule)
		t.Logf("%s: pace admitted %d (central %d) max a/l %.3f; uploads admitted %d (central %d) max a/l %.3f",
			p.Name, gp.Admitted, c.Rules[0].Admitted, gp.MaxAdmittedRatio, up.Admitted, c.Rules[1].Admitted, up.MaxAdmittedRatio)
		var sum uint64
		for _, rf := range p.Rules {
			sum += rf.Requests
		}
		assert.Equal(t, p.Requests, sum, "%s: every request is some rule's", p.Name)

		assert.InDelta(t, float64(c.Rules[1].Admitted), float64(up.Admitted), 0.02*float64(c.Rules[1].Admitted)+1, "%s: uploads", p.Name)
		assert.LessOrEqual(t, up.MaxAdmittedRatio, float64(uploads.Limit+2)/float64(uploads.Limit), "%s: uploads: one over per node of ams", p.Name)
		if p.Name == "partitioned" {
			one := float64(pace.Limit+pace.Burst) / float64(pace.Limit)
			assert.LessOrEqual(t, gp.MaxAdmittedRatio, 2*one, "the cut: each side paces on its own")
			assert.Greater(t, gp.MaxAdmittedRatio, one, "the cut: each side spends its own pace")
			assert.GreaterOrEqual(t, gp.Admitted, c.Rules[0].Admitted)
		}
	}
}
