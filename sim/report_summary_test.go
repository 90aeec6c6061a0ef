package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSummary: the policies that held the limit come first, each with its
// admits against the central limiter's; the fault phases are named.
func TestSummary(t *testing.T) {
	central := Central{Figures: Figures{Requests: 100, Admitted: 50, MaxAdmittedRatio: 1.003}}
	phases := []Phase{{Name: "healthy", FromMS: 0, ToMS: 30000}, {Name: "partitioned", FromMS: 30000, ToMS: 90000}, {Name: "healed", FromMS: 90000, ToMS: 120000}}
	keep := Report{Scenario: "s", Policy: "keep", DurationMS: 120000, Phases: phases, Central: central,
		Figures: Figures{Admitted: 100, MaxAdmittedRatio: 2.012}}
	share := Report{Scenario: "s", Policy: "share", DurationMS: 120000, Phases: phases, Central: central,
		Figures: Figures{Admitted: 42, MaxAdmittedRatio: 1.049}}
	for _, tt := range []struct {
		name    string
		reports []Report
		want    string
	}{
		{"compare", []Report{keep, share}, "s, 120s (partitioned 30s-90s): share stayed within 1.05 of the limit and admitted 0.84 of what one central limiter admits; " +
			"keep went to 2.01 times the limit and admitted 2.00 of it. The central limiter peaked at 1.00 of the limit."},
		{"one", []Report{keep}, "s, 120s (partitioned 30s-90s): keep went to 2.01 times the limit and admitted 2.00 of what one central limiter admits. " +
			"The central limiter peaked at 1.00 of the limit."},
		{"no fault, no central", []Report{{Scenario: "s", Policy: "keep", DurationMS: 1500, Phases: phases[:1], Figures: Figures{MaxAdmittedRatio: 0.5}}},
			"s, 1.500s (no fault): keep stayed within 0.50 of the limit."},
		{"none", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, Summary(tt.reports)) })
	}
}
