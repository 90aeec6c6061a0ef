package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/geolimit/geolimit/sim"
)

// Goal is the agreement a live run should reach with the simulator: the
// admitted/central and max admitted/limit figures within this of each other.
const Goal = 0.05

// Report is a chaos run's report. JSON field names are a contract.
type Report struct {
	Scenario  string  `json:"scenario"`
	Seed      uint64  `json:"seed"`
	DurationS float64 `json:"duration_s"`
	// Live and Sim are the two runs, measured the same way.
	Live Side `json:"live"`
	Sim  Side `json:"sim"`
	// Faults are the faults injected, in time order.
	Faults []Fault `json:"faults"`
	// UnexpectedExits are the node exits no fault ordered.
	UnexpectedExits []Exit `json:"unexpected_exits"`
	// LostAdmits is the sum of LostChecks' lost.
	LostAdmits uint64      `json:"lost_admits"`
	LostChecks []LostCheck `json:"lost_checks"`
	// Failed counts the live requests that got no decision, by node.
	Failed map[string]uint64 `json:"failed_requests"`
	// LateMaxMS is the most a live request left after its scheduled time.
	LateMaxMS float64 `json:"late_max_ms"`
	// Soak holds the soak mode's figures.
	Soak *Soak `json:"soak,omitempty"`

	liveSeries, simSeries []sim.SeriesRow
}

// Side is one run's figures.
type Side struct {
	Requests        uint64 `json:"requests"`
	Admitted        uint64 `json:"admitted"`
	CentralAdmitted uint64 `json:"central_admitted"`
	// AdmittedOverCentral is Admitted / CentralAdmitted.
	AdmittedOverCentral     float64     `json:"admitted_over_central"`
	MaxAdmittedRatio        float64     `json:"max_admitted_ratio"`
	CentralMaxAdmittedRatio float64     `json:"central_max_admitted_ratio"`
	OverLimitAdmits         uint64      `json:"over_limit_admits"`
	WronglyRejected         uint64      `json:"wrongly_rejected"`
	Phases                  []SidePhase `json:"phases"`
}

// SidePhase is one phase of a run.
type SidePhase struct {
	Name                    string       `json:"name"`
	FromMS                  int64        `json:"from_ms"`
	ToMS                    int64        `json:"to_ms"`
	Requests                uint64       `json:"requests"`
	Admitted                uint64       `json:"admitted"`
	CentralAdmitted         uint64       `json:"central_admitted"`
	AdmittedOverCentral     float64      `json:"admitted_over_central"`
	MaxAdmittedRatio        float64      `json:"max_admitted_ratio"`
	CentralMaxAdmittedRatio float64      `json:"central_max_admitted_ratio"`
	Regions                 []SideRegion `json:"regions"`
}

// SideRegion is one region's requests and admits in a phase, and the
// central node's admits on the same requests.
type SideRegion struct {
	Region          string `json:"region"`
	Requests        uint64 `json:"requests"`
	Admitted        uint64 `json:"admitted"`
	CentralAdmitted uint64 `json:"central_admitted"`
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*1e4) / 1e4
}

func side(r *sim.Report) Side {
	s := Side{
		Requests: r.Requests, Admitted: r.Admitted, CentralAdmitted: r.Central.Admitted,
		AdmittedOverCentral: ratio(r.Admitted, r.Central.Admitted),
		MaxAdmittedRatio:    r.MaxAdmittedRatio, CentralMaxAdmittedRatio: r.Central.MaxAdmittedRatio,
		OverLimitAdmits: r.OverLimitAdmits, WronglyRejected: r.WronglyRejected,
	}
	for i, p := range r.Phases {
		c := r.Central.Phases[i]
		sp := SidePhase{Name: p.Name, FromMS: p.FromMS, ToMS: p.ToMS, Requests: p.Requests, Admitted: p.Admitted,
			CentralAdmitted: c.Admitted, AdmittedOverCentral: ratio(p.Admitted, c.Admitted),
			MaxAdmittedRatio: p.MaxAdmittedRatio, CentralMaxAdmittedRatio: c.MaxAdmittedRatio}
		for ri, rg := range p.Regions {
			sp.Regions = append(sp.Regions, SideRegion{Region: rg.Region, Requests: rg.Requests, Admitted: rg.Admitted, CentralAdmitted: c.Regions[ri].Admitted})
		}
		s.Phases = append(s.Phases, sp)
	}
	return s
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Agrees reports whether the live run met the goal: admitted/central and
// max a/l within Goal of the simulator's, overall and in every phase, no
// unexpected exit, no lost admit.
func (r *Report) Agrees() (bool, []string) {
	var why []string
	cmp := func(what string, live, sim float64) {
		if math.Abs(live-sim) > Goal+1e-9 {
			why = append(why, fmt.Sprintf("%s: live %.3f, sim %.3f", what, live, sim))
		}
	}
	cmp("admitted/central", r.Live.AdmittedOverCentral, r.Sim.AdmittedOverCentral)
	cmp("max a/l", r.Live.MaxAdmittedRatio, r.Sim.MaxAdmittedRatio)
	for i, p := range r.Live.Phases {
		if i < len(r.Sim.Phases) {
			cmp(p.Name+" admitted/central", p.AdmittedOverCentral, r.Sim.Phases[i].AdmittedOverCentral)
			cmp(p.Name+" max a/l", p.MaxAdmittedRatio, r.Sim.Phases[i].MaxAdmittedRatio)
		}
	}
	if len(r.UnexpectedExits) > 0 {
		why = append(why, fmt.Sprintf("%d unexpected exits", len(r.UnexpectedExits)))
	}
	if r.LostAdmits > 0 {
		why = append(why, fmt.Sprintf("%d lost admits", r.LostAdmits))
	}
	return len(why) == 0, why
}

// WriteTable writes the two runs side by side.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "scenario %s  seed %d  duration %gs\n\n", r.Scenario, r.Seed, r.DurationS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tspan\trun\trequests\tadmitted\tcentral\tadm/central\tmax a/l\tcentral max a/l\t")
	row := func(name, span, run string, req, adm, cen uint64, ac, ml, cml float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t\n", name, span, run, req, adm, cen, ac, ml, cml)
	}
	phases := r.Live.Phases
	if r.Soak != nil {
		phases = nil // dozens of short phases: the totals say it
	}
	for i, p := range phases {
		span := fmt.Sprintf("%gs-%gs", float64(p.FromMS)/1000, float64(p.ToMS)/1000)
		row(p.Name, span, "live", p.Requests, p.Admitted, p.CentralAdmitted, p.AdmittedOverCentral, p.MaxAdmittedRatio, p.CentralMaxAdmittedRatio)
		if i < len(r.Sim.Phases) {
			s := r.Sim.Phases[i]
			row(p.Name, span, "sim", s.Requests, s.Admitted, s.CentralAdmitted, s.AdmittedOverCentral, s.MaxAdmittedRatio, s.CentralMaxAdmittedRatio)
		}
	}
	span := fmt.Sprintf("0s-%gs", r.DurationS)
	row("all", span, "live", r.Live.Requests, r.Live.Admitted, r.Live.CentralAdmitted, r.Live.AdmittedOverCentral, r.Live.MaxAdmittedRatio, r.Live.CentralMaxAdmittedRatio)
	row("all", span, "sim", r.Sim.Requests, r.Sim.Admitted, r.Sim.CentralAdmitted, r.Sim.AdmittedOverCentral, r.Sim.MaxAdmittedRatio, r.Sim.CentralMaxAdmittedRatio)
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, p := range phases {
		if len(p.Regions) < 2 || i >= len(r.Sim.Phases) {
			continue
		}
		fmt.Fprintf(w, "%s by region, admitted / central (live | sim):", p.Name)
		for ri, rg := range p.Regions {
			s := r.Sim.Phases[i].Regions[ri]
			fmt.Fprintf(w, " %s %d/%d | %d/%d;", rg.Region, rg.Admitted, rg.CentralAdmitted, s.Admitted, s.CentralAdmitted)
		}
		fmt.Fprintln(w)
	}
	var fs []string
	for _, f := range r.Faults {
		s := fmt.Sprintf("%gs %s", f.AtS, f.Kind)
		if f.What != "" {
			s += " " + f.What
		}
		if f.DetectedS != nil {
			s += fmt.Sprintf(" (members dropped it after %gs)", *f.DetectedS)
		}
		if f.ReconnectedS != nil {
			s += fmt.Sprintf(" (gateways back after %gs)", *f.ReconnectedS)
		}
		for _, g := range f.GatewaysLost {
			s += fmt.Sprintf(" (%s's gateway to %s back after %gs)", g.Node, g.Region, g.BackS)
		}
		fs = append(fs, s)
	}
	fmt.Fprintf(w, "faults: %s\n", strings.Join(fs, "; "))
	var failed []string
	for _, n := range sortedNames(r.Failed) {
		failed = append(failed, fmt.Sprintf("%s %d", n, r.Failed[n]))
	}
	fmt.Fprintf(w, "unexpected exits: %d; lost admits: %d; live requests without a decision: %s; latest send %.1fms after schedule\n",
		len(r.UnexpectedExits), r.LostAdmits, orNone(strings.Join(failed, ", ")), r.LateMaxMS)
	for _, c := range r.LostChecks {
		fmt.Fprintf(w, "  %s/%s from %gs: admitted %d (and %d sent before, answered after), held %d, lost %d, converged %v\n", c.Rule, c.Key, c.FromS, c.Admitted, c.Straddling, c.Held, c.Lost, c.Converged)
	}
	if ok, why := r.Agrees(); ok {
		fmt.Fprintf(w, "live and sim agree within %.2f\n", Goal)
	} else {
		fmt.Fprintf(w, "live and sim disagree: %s\n", strings.Join(why, "; "))
	}
	if r.Soak != nil {
		r.Soak.writeTable(w)
	}
	_, err := fmt.Fprintln(w, "a/l: exact admitted cost in the trailing window / limit; central: one node deciding the same arrivals")
	return err
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WriteSVG plots live and simulated admitted/limit of the first tracked
// key over time (and the central node's on the live arrivals).
func (r *Report) WriteSVG(w io.Writer) error {
	const W, H, pad = 900.0, 360.0, 50.0
	pick := func(rows []sim.SeriesRow) []sim.SeriesRow {
		if len(rows) == 0 {
			return nil
		}
		var out []sim.SeriesRow
		for _, row := range rows {
			if row.Rule == rows[0].Rule && row.Key == rows[0].Key {
				out = append(out, row)
			}
		}
		return out
	}
	live, simr := pick(r.liveSeries), pick(r.simSeries)
	ymax := 1.2
	for _, rows := range [][]sim.SeriesRow{live, simr} {
		for _, row := range rows {
			if row.Limit > 0 {
				ymax = max(ymax, float64(row.True)/float64(row.Limit)*1.1, float64(row.Central)/float64(row.Limit)*1.1)
			}
		}
	}
	dur := r.DurationS * 1000
	x := func(ms int64) float64 { return pad + (W-2*pad)*float64(ms)/dur }
	y := func(v float64) float64 { return H - pad - (H-2*pad)*v/ymax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for _, p := range r.Live.Phases {
		if p.Name == "partitioned" {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f4e0e0"/>`+"\n", x(p.FromMS), pad, x(p.ToMS)-x(p.FromMS), H-2*pad)
		}
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", pad, y(1), W-pad, y(1))
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", pad, H-pad, W-pad, H-pad, pad, pad, pad, H-pad)
	for v := 0.0; v <= ymax; v += 0.5 {
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%.1f</text>`+"\n", pad-5, y(v)+4, v)
	}
	for s := 0.0; s <= r.DurationS; s += math.Max(10, math.Round(r.DurationS/60)*10) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%gs</text>`+"\n", x(int64(s*1000)), H-pad+16, s)
	}
	line := func(rows []sim.SeriesRow, central bool, color, dash string) {
		var pts []string
		for _, row := range rows {
			if row.Limit == 0 {
				continue
			}
			v := row.True
			if central {
				v = row.Central
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(row.TMS), y(float64(v)/float64(row.Limit))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="%s" points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
	}
	line(live, true, "#888", "2 2")
	line(simr, false, "#1f77b4", "6 3")
	line(live, false, "#d62728", "")
	title := r.Scenario
	if len(live) > 0 {
		title += fmt.Sprintf(" — %s/%s admitted/limit", live[0].Rule, live[0].Key)
	}
	fmt.Fprintf(&b, `<text x="%g" y="20" font-size="14">%s</text>`+"\n", pad, xmlEscape(title))
	legend := []struct{ c, d, t string }{{"#d62728", "", "live"}, {"#1f77b4", "6 3", "simulated"}, {"#888", "2 2", "central (live arrivals)"}}
	for i, l := range legend {
		lx := W - pad - 190
		ly := pad + 10 + float64(i)*16
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", lx, ly, lx+24, ly, l.c, l.d, lx+30, ly+4, l.t)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
