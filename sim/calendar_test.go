package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ruleIn returns the figures of rule in phase p.
func ruleIn(t *testing.T, p Phase, rule string) RuleFigures {
	t.Helper()
	for _, f := range p.Rules {
		if f.Rule == rule {
			return f
		}
	}
	require.Failf(t, "no figures", "rule %s in phase %s", rule, p.Name)
	return RuleFigures{}
}

// A monthly quota across a two-region cut that spans the month's boundary
// (scenarios/calendar-month-cut.yaml), beside a sliding rule of the same
// limit under the same traffic: under share the calendar rule stays within
// the bound the sliding one does (at its limit: max admitted/limit 1.01 at
// most, over-limit admits a hundredth of the admits at most), where keep
// lets each side spend the quota on its own (`go run ./cmd/sim -scenario
// calendar-month-cut -compare keep,share`). The oracle counts by calendar
// month: the central node admits exactly November's rest and December's
// whole quota.
func TestCalendarCutAcrossTheBoundary(t *testing.T) {
	sc, err := Load("../scenarios/calendar-month-cut.yaml")
	require.NoError(t, err)
	share, err := Run(sc, Options{Policy: "share"})
	require.NoError(t, err)
	cut := -1
	for i, p := range share.Report.Phases {
		if p.Name == "partitioned" {
			cut = i
		}
	}
	require.GreaterOrEqual(t, cut, 0)
	for _, rule := range []string{"plan", "api"} {
		s := ruleIn(t, share.Report.Phases[cut], rule)
		t.Logf("%s in the cut: share admitted %d, over %d, max a/l %.5f", rule, s.Admitted, s.OverLimitAdmits, s.MaxAdmittedRatio)
		assert.LessOrEqual(t, s.MaxAdmittedRatio, 1.01, rule)
		assert.LessOrEqual(t, float64(s.OverLimitAdmits), 0.01*float64(s.Admitted), rule)
	}
	var central uint64
	for _, p := range share.Report.Central.Phases {
		central += ruleIn(t, p, "plan").Admitted
	}
	assert.Equal(t, uint64(2*2000), central, "November's 2 000 and December's")
	assert.Zero(t, ruleIn(t, share.Report.Central.Phases[cut+1], "plan").Admitted, "December's quota spent in the cut")
}

func TestScenarioStart(t *testing.T) {
	base := "name: s\nduration: 1s\ntopology: [{region: eu, pops: [{name: ams, nodes: 1}]}]\nrules: [{name: r, limit: 5, calendar: {period: day}}]\ntraffic: [{rule: r, keys: 1, rate: 10/s}]\n"
	sc, err := Parse([]byte(base + "start: 2026-11-30T23:59:59.5Z\n"))
	require.NoError(t, err)
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	// 5 per day: the day's last half second, then the next day's first.
	assert.EqualValues(t, 10, res.Report.Central.Admitted, "the day's boundary falls inside the run")
	_, err = Parse([]byte(base + "start: 1900-01-01T00:00:00Z\n"))
	assert.ErrorContains(t, err, "start: must lie between 1970 and 2200")
}
