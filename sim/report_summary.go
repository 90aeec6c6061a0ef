package sim

import (
	"fmt"
	"strings"
)

// The plain-language summary that leads the text and HTML reports, and
// what the central limiter is: both written once, here.

// centralMeaning explains the central decider, for the text and HTML
// reports.
const centralMeaning = "central is one node deciding every request of the same arrivals with the same sliding-window " +
	"estimate and zero latency, measured against the exact count like the fleet: its over-limit admits and wrong " +
	"rejects are the estimate's own error (it weighs the previous window by the time left, as if its admits were " +
	"spread evenly), the floor a replicated fleet can reach, not a fault of the fleet."

// faultSpans names the phases that are not healthy or healed, with their
// spans ("partitioned 30s-90s").
func faultSpans(r Report) []string {
	var out []string
	for _, p := range r.Phases {
		if p.Name != "healthy" && p.Name != "healed" {
			out = append(out, p.Name+" "+fmtMS(p.FromMS)+"-"+fmtMS(p.ToMS))
		}
	}
	return out
}

// limitPhrase says how far over the limit f went: "stayed within 1.02 of
// the limit" or "went to 2.01 times the limit".
func limitPhrase(f Figures) string {
	if f.MaxAdmittedRatio <= 1.1 {
		return fmt.Sprintf("stayed within %.2f of the limit", f.MaxAdmittedRatio)
	}
	return fmt.Sprintf("went to %.2f times the limit", f.MaxAdmittedRatio)
}

// Summary says in one paragraph how each policy of reports (runs of one
// scenario on the same arrivals) held the limit, and what it admitted
// against one central limiter: e.g. "share stayed within 1.02 of the limit
// and admitted 1.00 of what one central limiter admits; keep went to 2.01
// times the limit and admitted 1.49 of it." Policies that held the limit
// come first.
func Summary(reports []Report) string {
	if len(reports) == 0 {
		return ""
	}
	r0 := reports[0]
	c := r0.Central.Figures
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s", r0.Scenario, fmtMS(r0.DurationMS))
	if f := faultSpans(r0); len(f) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(f, ", "))
	} else {
		b.WriteString(" (no fault)")
	}
	b.WriteString(": ")
	var held, over []Report
	for _, r := range reports {
		if r.MaxAdmittedRatio <= 1.1 {
			held = append(held, r)
		} else {
			over = append(over, r)
		}
	}
	for i, r := range append(held, over...) {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", label(r.Policy), limitPhrase(r.Figures))
		if c.Admitted > 0 {
			if i == 0 {
				fmt.Fprintf(&b, " and admitted %.2f of what one central limiter admits", float64(r.Admitted)/float64(c.Admitted))
			} else {
				fmt.Fprintf(&b, " and admitted %.2f of it", float64(r.Admitted)/float64(c.Admitted))
			}
		}
	}
	b.WriteString(".")
	if c.Requests > 0 {
		fmt.Fprintf(&b, " The central limiter peaked at %.2f of the limit.", c.MaxAdmittedRatio)
	}
	return b.String()
}

// label is a run's policy as the reports name it.
func label(policy string) string {
	if policy == "" {
		return "the fleet"
	}
	return policy
}
