package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The figures of docs/replication.md ("Where share guesses"): each test runs
// one of the scenarios written for it (scenarios/*.yaml), shortened where
// the figure does not need the whole run. Same seed, same numbers.

// runScenario loads and runs a scenario, with its duration cut to dur when
// dur is not 0, and logs the headline figures.
func runScenario(t *testing.T, name string, dur time.Duration) Report {
	t.Helper()
	sc, err := Load("../scenarios/" + name + ".yaml")
	require.NoError(t, err)
	if dur != 0 {
		sc.Duration = dur
		for i := range sc.Traffic {
			sc.Traffic[i].End = min(sc.Traffic[i].End, dur)
		}
	}
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	t.Logf("%s: admitted %d (central %d), max a/l %.3f (central %.3f), rejected below half %d (central %d)",
		name, r.Admitted, r.Central.Admitted, r.MaxAdmittedRatio, r.Central.MaxAdmittedRatio, r.RejectedBelowHalf, r.Central.RejectedBelowHalf)
	return r
}

// Keys below half their limit fleet-wide are never refused, however many
// nodes share them: 2 000 keys at 0.3 of their limit over 4 and 32 PoPs.
// Before the spare room and the armed hot entries, 112 and 49 requests of
// such keys were refused in the run (0.3 % and 0.15 %).
func TestBelowHalfNeverRejected(t *testing.T) {
	for _, name := range []string{"below-half-4pops", "below-half-32pops"} {
		r := runScenario(t, name, 15*time.Second)
		assert.Zero(t, r.Central.RejectedBelowHalf, name)
		assert.Zero(t, r.RejectedBelowHalf, name)
		assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.0, name)
	}
}
