package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"}

// WriteSVG writes a plot of the exact fleet-wide admitted cost in the
// trailing window over the limit (1.0 = at the limit) against time, one
// line per tracked key and run (runs of -compare share the axes, each in
// its own colour and dash pattern), the limit as a wide grey band, the
// central node's lines dotted green under them, and the fault phases
// shaded and labelled.
func WriteSVG(w io.Writer, runs ...*Result) error {
	const (
		width, height = 960, 420
		left, right   = 60, 200
		top, bottom   = 40, 50
	)
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	r0 := runs[0].Report
	dur := float64(max(r0.DurationMS, 1))
	ymax := 2.0
	for _, res := range runs {
		for _, row := range res.Series {
			ymax = max(ymax, float64(row.True)/float64(row.Limit), float64(row.Central)/float64(row.Limit))
		}
	}
	ymax = math.Ceil(ymax*1.1*2) / 2
	x := func(ms float64) float64 { return float64(left) + pw*ms/dur }
	y := func(r float64) float64 { return float64(top) + ph*(1-r/ymax) }

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%d" y="18" font-size="15">%s: admitted in trailing window / limit</text>`+"\n", left, html.EscapeString(r0.Scenario))
	// The fault phases, shaded and labelled at their top.
	for _, p := range r0.Phases {
		if p.Name == "healthy" || p.Name == "healed" {
			continue
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%.0f" fill="#f2b8b8" fill-opacity="0.45"/>`+"\n",
			x(float64(p.FromMS)), top, x(float64(p.ToMS))-x(float64(p.FromMS)), ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#a40e26">%s %s-%s</text>`+"\n",
			(x(float64(p.FromMS))+x(float64(p.ToMS)))/2, top-4, html.EscapeString(p.Name), fmtMS(p.FromMS), fmtMS(p.ToMS))
	}
	// Axes and grid.
	for i := 0; i <= int(ymax*2); i++ {
		r := float64(i) / 2
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(r), float64(left)+pw, y(r))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n", left-6, y(r)+4, r)
	}
	tick := niceStep(dur / 1000 / 8)
	for s := 0.0; s <= dur/1000+1e-9; s += tick {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#999"/>`+"\n", x(s*1000), float64(top)+ph, x(s*1000), float64(top)+ph+5)
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%gs</text>`+"\n", x(s*1000), float64(top)+ph+18, s)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">simulated time (shaded: partitioned)</text>`+"\n", float64(left)+pw/2, height-10)

	// Lines: per run and tracked key, then the central node per key.
	ly := top + 10
	legend := func(color, dash, label string) {
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", width-right+12, ly, width-right+36, ly, color, dash)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", width-right+42, ly+4, html.EscapeString(label))
		ly += 18
	}
	// The limit: a wide grey band under the lines, so that a line that
	// follows it (share, central) still shows on top of it; first in the
	// legend.
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#bbb" stroke-width="7"/>`+"\n", left, y(1), float64(left)+pw, y(1))
	legend("#bbb", "none", "limit")
	c := 0
	line := func(res *Result, key string, val func(SeriesRow) float64, color, dash, label string, width float64) {
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-dasharray="%s" points="`, color, width, dash)
		for _, row := range res.Series {
			if row.Rule+"/"+row.Key == key {
				fmt.Fprintf(b, "%.1f,%.1f ", x(float64(row.TMS)), y(val(row)))
			}
		}
		b.WriteString("\"/>\n")
		legend(color, dash, label)
	}
	keys := seriesKeys(runs[0])
	// The central limiter under the policies, dotted in its own colour;
	// each policy in its own colours and dash pattern on top.
	for _, k := range keys {
		line(runs[0], k, func(r SeriesRow) float64 { return float64(r.Central) / float64(r.Limit) }, "#1b7f3b", "2 3", "central "+k, 2.6)
	}
	for i, res := range runs {
		for _, k := range keys {
			line(res, k, func(r SeriesRow) float64 { return float64(r.True) / float64(r.Limit) }, palette[c%len(palette)], runDash[i%len(runDash)], res.Report.Policy+" "+k, 1.6)
			c++
		}
	}
	b.WriteString("</svg>\n")
	return b.Flush()
}

// runDash are the dash patterns of the compared runs, in order.
var runDash = []string{"none", "7 3", "1 2"}

// seriesKeys returns the tracked rule/key names in first-seen order.
func seriesKeys(res *Result) []string {
	var out []string
	seen := map[string]bool{}
	for _, row := range res.Series {
		k := row.Rule + "/" + row.Key
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
