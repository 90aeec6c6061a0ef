package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"io"
)

// htmlStyle is the report's only style sheet; the report has no script and
// loads nothing.
const htmlStyle = `body{font:15px/1.5 system-ui,sans-serif;max-width:1000px;margin:1.5rem auto;padding:0 1rem;color:#1f2328}
h1{font-size:1.4rem;margin-bottom:.2rem}h2{font-size:1.1rem;margin-top:1.6rem}
.meta{color:#6e7781;font-size:13px}.summary{font-size:1.1rem;background:#f6f8fa;border-left:4px solid #0969da;padding:.6rem .9rem}
table{border-collapse:collapse;font-size:13px;margin:.4rem 0}th,td{padding:.2rem .6rem;border-bottom:1px solid #d0d7de;text-align:right}
th:first-child,td:first-child{text-align:left}th{color:#57606a;font-weight:600}
tr.central td{color:#1b7f3b}tr.fault td:first-child{color:#a40e26}
details{margin:.6rem 0}summary{cursor:pointer;font-weight:600}svg{max-width:100%;height:auto}dt{font-weight:600}dd{margin:0 0 .5rem 1rem}`

// WriteHTML writes one self-contained HTML report of runs (runs of one
// scenario on the same arrivals, as -compare makes them): the summary
// (Summary) first, then the plot (WriteSVG) and the admits of each decider
// per phase against the central limiter, the phases table (folded), the
// admits per region in each phase, replication, and what each figure
// means. It loads nothing and runs no script.
func WriteHTML(w io.Writer, runs ...*Result) error {
	reports := make([]Report, len(runs))
	for i, r := range runs {
		reports[i] = r.Report
	}
	r0 := reports[0]
	b := bufio.NewWriter(w)
	e := html.EscapeString
	fmt.Fprintf(b, "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>geolimit simulation: %s</title>\n<style>%s</style>\n</head>\n<body>\n", e(r0.Scenario), htmlStyle)
	fmt.Fprintf(b, "<h1>Simulation: %s</h1>\n<p class=\"meta\">seed %d · %s simulated · %d requests · policies: ", e(r0.Scenario), r0.Seed, fmtMS(r0.DurationMS), r0.Requests)
	for i, r := range reports {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e(r.Policy))
	}
	b.WriteString("</p>\n")
	fmt.Fprintf(b, "<p class=\"summary\" id=\"summary\">%s</p>\n", e(Summary(reports)))

	b.WriteString("<h2>Admitted in the trailing window over the limit</h2>\n")
	var svg bytes.Buffer
	if err := WriteSVG(&svg, runs...); err != nil {
		return err
	}
	b.Write(svg.Bytes())
	b.WriteString("<p class=\"meta\">1.0 is the limit. Shaded: the fault phases. Each policy has its own colour and dash pattern; the central limiter is dotted green.</p>\n")

	b.WriteString("<h2>Admitted per phase, against one central limiter</h2>\n")
	writeAdmitBars(b, reports)

	b.WriteString("<details id=\"phases\">\n<summary>Phases table</summary>\n<table>\n<tr><th>phase</th><th>span</th><th>decider</th><th>requests</th><th>admitted</th><th>over-limit</th><th>wrong-rej</th><th>max a/l</th><th>p99 a/l</th><th>mean a/l</th></tr>\n")
	row := func(class, name, span, who string, f Figures) {
		fmt.Fprintf(b, "<tr class=\"%s\"><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%d (%.2f%%)</td><td>%d (%.2f%%)</td><td>%.3f</td><td>%.3f</td><td>%.3f</td></tr>\n",
			class, e(name), span, e(who), f.Requests, f.Admitted, f.OverLimitAdmits, 100*f.OverLimitFraction,
			f.WronglyRejected, 100*f.WronglyRejectedFraction, f.MaxAdmittedRatio, f.P99AdmittedRatio, f.MeanAdmittedRatio)
	}
	for i, p := range r0.Phases {
		class := ""
		if p.Name != "healthy" && p.Name != "healed" {
			class = "fault"
		}
		span := fmtMS(p.FromMS) + "-" + fmtMS(p.ToMS)
		for _, r := range reports {
			row(class, p.Name, span, r.Policy, r.Phases[i].Figures)
		}
		if len(r0.Central.Phases) > i {
			row("central", p.Name, span, "central", r0.Central.Phases[i].Figures)
		}
	}
	for _, r := range reports {
		row("", "all", "0s-"+fmtMS(r0.DurationMS), r.Policy, r.Figures)
	}
	row("central", "all", "0s-"+fmtMS(r0.DurationMS), "central", r0.Central.Figures)
	b.WriteString("</table>\n</details>\n")

	b.WriteString("<h2>Admitted per region</h2>\n<table id=\"regions\">\n<tr><th>phase</th><th>region</th><th>requests</th>")
	for _, r := range reports {
		fmt.Fprintf(b, "<th>%s</th>", e(r.Policy))
	}
	b.WriteString("<th>central</th></tr>\n")
	for i, p := range r0.Phases {
		for ri, rf := range p.Regions {
			fmt.Fprintf(b, "<tr><td>%s %s-%s</td><td>%s</td><td>%d</td>", e(p.Name), fmtMS(p.FromMS), fmtMS(p.ToMS), e(rf.Region), rf.Requests)
			for _, r := range reports {
				fmt.Fprintf(b, "<td>%d</td>", r.Phases[i].Regions[ri].Admitted)
			}
			c := "-"
			if len(r0.Central.Phases) > i && ri < len(r0.Central.Phases[i].Regions) {
				c = fmt.Sprint(r0.Central.Phases[i].Regions[ri].Admitted)
			}
			fmt.Fprintf(b, "<td>%s</td></tr>\n", c)
		}
	}
	b.WriteString("</table>\n<p class=\"meta\">A region's admits are its nodes' decisions on the requests it served; central's, the central limiter's decisions on the same requests.</p>\n")

	b.WriteString("<h2>Replication</h2>\n<table>\n<tr><th>policy</th><th>convergence after heal (ms)</th><th>per node from other PoPs (msg/s)</th><th>bytes/s</th><th>per PoP to other PoPs (msg/s)</th><th>bytes/s</th></tr>\n")
	for _, r := range reports {
		rp := &r.Replication
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td></tr>\n", e(r.Policy), e(fmtFloats(r.ConvergenceMS)),
			rp.NodeInboundMessagesPerS, rp.NodeInboundBytesPerS, rp.PoPOutboundMessagesPerS, rp.PoPOutboundBytesPerS)
	}
	b.WriteString("</table>\n")

	fmt.Fprintf(b, `<h2>What the figures mean</h2>
<dl id="meaning">
<dt>central</dt><dd>%s</dd>
<dt>over-limit admits</dt><dd>Admits after which the exact count of the key's admitted cost in the trailing window, this admit included, exceeded the limit.</dd>
<dt>wrong rejects</dt><dd>Rejects whose cost would have fit under the exact trailing-window count. Traffic well above the limit makes many: the sliding-window estimate rejects while the exact count still has room.</dd>
<dt>a/l</dt><dd>The exact admitted cost in the trailing window over the limit: max over every instant, p99 and mean over samples taken ten times a window per key.</dd>
<dt>phases</dt><dd>healthy until the first fault; partitioned while a cut, a flapping link or a node down is in force; healed after.</dd>
</dl>
`, e(centralMeaning))
	b.WriteString("</body>\n</html>\n")
	return b.Flush()
}

// writeAdmitBars draws, per phase, one bar per decider: its admits, the
// central limiter's as the reference line, so that "admitted 0.84 of what
// one central limiter admits" shows.
func writeAdmitBars(b *bufio.Writer, reports []Report) {
	r0 := reports[0]
	n := len(reports) + 1
	const (
		barW, gap, groupGap = 26, 4, 34
		top, plotH, left    = 20, 160, 50
	)
	phases := append([]Phase{}, r0.Phases...)
	phases = append(phases, Phase{Name: "all", Figures: r0.Figures})
	fig := func(d, i int) Figures { // decider d (n-1: central) in phase i (len: all)
		switch {
		case d == n-1 && i == len(r0.Phases):
			return r0.Central.Figures
		case d == n-1:
			if i < len(r0.Central.Phases) {
				return r0.Central.Phases[i].Figures
			}
			return Figures{}
		case i == len(r0.Phases):
			return reports[d].Figures
		default:
			return reports[d].Phases[i].Figures
		}
	}
	var ymax uint64 = 1
	for i := range phases {
		for d := range n {
			ymax = max(ymax, fig(d, i).Admitted)
		}
	}
	groupW := n*(barW+gap) + groupGap
	width := left + len(phases)*groupW + 200
	height := top + plotH + 40
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, top+plotH, width-200, top+plotH)
	colour := func(d int) string {
		if d == n-1 {
			return "#1b7f3b"
		}
		return palette[d%len(palette)]
	}
	for i, p := range phases {
		x0 := left + i*groupW
		c := fig(n-1, i).Admitted
		for d := range n {
			f := fig(d, i)
			h := float64(plotH) * float64(f.Admitted) / float64(ymax)
			x := x0 + d*(barW+gap)
			fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"/>`+"\n", x, float64(top+plotH)-h, barW, h, colour(d))
			if d < n-1 && c > 0 {
				fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="middle" font-size="10">%.2f</text>`+"\n", x+barW/2, float64(top+plotH)-h-3, float64(f.Admitted)/float64(c))
			}
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+n*(barW+gap)/2, top+plotH+16, html.EscapeString(p.Name))
		if p.Name != "all" {
			fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#6e7781" font-size="10">%s-%s</text>`+"\n", x0+n*(barW+gap)/2, top+plotH+30, fmtMS(p.FromMS), fmtMS(p.ToMS))
		}
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%d</text>`+"\n", left-6, top+4, ymax)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">0</text>`+"\n", left-6, top+plotH+4)
	ly := top + 10
	for d := range n {
		name := "central"
		if d < n-1 {
			name = reports[d].Policy
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", width-190, ly-9, colour(d), width-170, ly, html.EscapeString(name))
		ly += 18
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#6e7781" font-size="11">over a bar: admitted / central</text>`+"\n", width-190, ly+6)
	b.WriteString("</svg>\n")
}
