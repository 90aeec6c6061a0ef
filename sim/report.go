package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/geolimit/geolimit/repl"
)

// Figures are the drift measures of one decider over a span of time.
type Figures struct {
	// Requests decided.
	Requests uint64 `json:"requests"`
	// Admitted and Rejected requests.
	Admitted uint64 `json:"admitted"`
	Rejected uint64 `json:"rejected"`
	// OverLimitAdmits: admits after which the exact trailing-window admitted
	// cost of their (rule, key), including them, exceeded the limit.
	OverLimitAdmits uint64 `json:"over_limit_admits"`
	// WronglyRejected: rejects whose cost would have fit under the exact
	// trailing-window admitted cost.
	WronglyRejected uint64 `json:"wrongly_rejected"`
	// OverLimitFraction is OverLimitAdmits / Admitted.
	OverLimitFraction float64 `json:"over_limit_fraction"`
	// RejectedBelowHalf: rejects whose cost, added to the exact
	// trailing-window admitted cost, stayed within half the limit (of the
	// rule's first window): a key far from its limit refused all the same.
	RejectedBelowHalf uint64 `json:"rejected_below_half"`
	// WronglyRejectedFraction is WronglyRejected / Requests.
	WronglyRejectedFraction float64 `json:"wrongly_rejected_fraction"`
	// MaxAdmittedRatio is the highest exact trailing-window admitted cost of
	// any key over its limit, at any instant (it can only peak at an admit).
	MaxAdmittedRatio float64 `json:"max_admitted_ratio"`
	// P99AdmittedRatio and MeanAdmittedRatio are over samples taken ten
	// times per window length W: at t = k x W/10 for the run, at t = phase
	// start + k x W/10 within a phase; one sample per key that saw a request
	// in (t-W, t], the exact admitted cost in (t-W, t] over the limit.
	P99AdmittedRatio  float64 `json:"p99_admitted_ratio"`
	MeanAdmittedRatio float64 `json:"mean_admitted_ratio"`
	// AdmittedRatioSamples is the number of those samples (0: the span is
	// shorter than a tenth of the window, and p99 and mean are 0).
	AdmittedRatioSamples int `json:"admitted_ratio_samples"`
}

// Phase is a span of the run: healthy (before any fault), partitioned (a cut
// in force, a flapping link, or a node down) or healed (after a fault).
type Phase struct {
	Name   string `json:"name"`
	FromMS int64  `json:"from_ms"`
	ToMS   int64  `json:"to_ms"`
	Figures
	// Regions are the requests and admits of the phase by the region that
	// served them, in topology order.
	Regions []RegionFigures `json:"regions"`
	// Rules are the figures of the phase by rule, in the scenario's order,
	// when it has more than one rule.
	Rules []RuleFigures `json:"rules,omitempty"`
}

// RuleFigures are the decisions on one rule's requests in a phase.
type RuleFigures struct {
	Rule             string  `json:"rule"`
	Requests         uint64  `json:"requests"`
	Admitted         uint64  `json:"admitted"`
	OverLimitAdmits  uint64  `json:"over_limit_admits"`
	WronglyRejected  uint64  `json:"wrongly_rejected"`
	MaxAdmittedRatio float64 `json:"max_admitted_ratio"`
}

// RegionFigures are the decisions one region's nodes took (for the central
// node: the decisions on the requests that region served).
type RegionFigures struct {
	Region   string `json:"region"`
	Requests uint64 `json:"requests"`
	Admitted uint64 `json:"admitted"`
}

// Replication is what the nodes of each PoP sent, per second of simulated
// time, keyed by "region/pop": one message per memberlist send to each
// member, one per NATS publish (deltas, anti-entropy, heartbeats, join sync).
type Replication struct {
	MessagesPerSPerPoP map[string]float64 `json:"messages_per_s_per_pop"`
	BytesPerSPerPoP    map[string]float64 `json:"bytes_per_s_per_pop"`
	// Capacity figures, per second of simulated time: what one node
	// receives from other PoPs (mean over nodes), and what one PoP publishes
	// to other PoPs (mean over PoPs; each publish reaches every node of every
	// other PoP).
	NodeInboundMessagesPerS float64 `json:"node_inbound_messages_per_s"`
	NodeInboundEntriesPerS  float64 `json:"node_inbound_entries_per_s"`
	NodeInboundBytesPerS    float64 `json:"node_inbound_bytes_per_s"`
	// Of those, the messages of counts (deltas and relayed state: not
	// heartbeats or sync requests) and their entries from other regions:
	// with region voices one message per other region per flush interval,
	// plus anti-entropy.
	NodeInterRegionCountMessagesPerS float64 `json:"node_inter_region_count_messages_per_s"`
	NodeInterRegionEntriesPerS       float64 `json:"node_inter_region_entries_per_s"`
	PoPOutboundMessagesPerS          float64 `json:"pop_outbound_messages_per_s"`
	PoPOutboundBytesPerS             float64 `json:"pop_outbound_bytes_per_s"`
	// NodeInboundByKind splits what one node receives from other PoPs by
	// kind: "delta", "heartbeat", "sync" and "state" between PoPs, and
	// "region delta" and "region heartbeat" (a region's voice and its
	// heartbeat turns); kinds never received are left out.
	NodeInboundByKind map[string]Inbound `json:"node_inbound_by_kind"`
}

// Inbound is what one node receives of one kind, per second of simulated
// time (mean over nodes).
type Inbound struct {
	MessagesPerS float64 `json:"messages_per_s"`
	EntriesPerS  float64 `json:"entries_per_s"`
	BytesPerS    float64 `json:"bytes_per_s"`
}

// Central are the figures of the same arrival stream decided by one node
// with zero latency.
type Central struct {
	Figures
	Phases []Phase `json:"phases"`
}

// Report is the JSON report of one run. Field names are a contract (the
// docs/simulator.md lists them): fields may be added, never
// renamed.
type Report struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	Policy   string `json:"policy"`
	Figures
	DurationMS int64 `json:"duration_ms"`
	// Unserved counts requests that found every PoP down.
	Unserved      uint64      `json:"unserved"`
	Phases        []Phase     `json:"phases"`
	ConvergenceMS []float64   `json:"convergence_ms"`
	Replication   Replication `json:"replication"`
	Central       Central     `json:"central"`
	// SimRequestsPerS is simulated requests per second of wall time: the
	// only figure that is not a function of the scenario and seed.
	SimRequestsPerS float64 `json:"sim_requests_per_s"`
}

// SeriesRow is one time-series sample of one tracked key.
type SeriesRow struct {
	TMS   int64
	Rule  string
	Key   string
	Limit uint64
	// True is the exact fleet-wide admitted cost in the trailing window.
	True uint64
	// Central is the same for the central node.
	Central uint64
	// Partitioned is set during a partitioned phase.
	Partitioned bool
	// Views is, per region, the highest estimate among its live nodes
	// (-1 when none is up).
	Views []float64
}

// Result is everything a run produces: plain values, safe to read from any
// goroutine once Run has returned.
type Result struct {
	Report  Report
	Regions []string
	Series  []SeriesRow
}

// figures sums tallies ts and summarises samples, which it sorts.
func figures(ts []tally, samples []float64) Figures {
	var f Figures
	for _, t := range ts {
		f.Requests += t.requests
		f.Admitted += t.admitted
		f.Rejected += t.rejected
		f.OverLimitAdmits += t.overLimit
		f.WronglyRejected += t.wronglyRejected
		f.RejectedBelowHalf += t.rejectedBelowHalf
		f.MaxAdmittedRatio = max(f.MaxAdmittedRatio, t.maxRatio)
	}
	if f.Admitted > 0 {
		f.OverLimitFraction = round(float64(f.OverLimitAdmits) / float64(f.Admitted))
	}
	if f.Requests > 0 {
		f.WronglyRejectedFraction = round(float64(f.WronglyRejected) / float64(f.Requests))
	}
	f.MaxAdmittedRatio = round(f.MaxAdmittedRatio)
	f.AdmittedRatioSamples = len(samples)
	if len(samples) > 0 {
		s := samples
		slices.Sort(s)
		sum := 0.0
		for _, x := range s {
			sum += x
		}
		f.MeanAdmittedRatio = round(sum / float64(len(s)))
		// Nearest rank.
		f.P99AdmittedRatio = round(s[int(math.Ceil(0.99*float64(len(s))))-1])
	}
	return f
}

func (e *engine) phaseFigures(o *oracle) (Figures, []Phase) {
	ph := make([]Phase, len(e.phases))
	for i, p := range e.phases {
		ph[i] = Phase{Name: p.name, FromMS: p.from / 1e6, ToMS: p.to / 1e6, Figures: figures(o.phases[i:i+1], o.phases[i].samples.flat())}
		ph[i].Regions = make([]RegionFigures, len(e.regions))
		for ri, name := range e.regions {
			ph[i].Regions[ri].Region = name
			if bt := o.phases[i].byRegion; ri < len(bt) {
				ph[i].Regions[ri].Requests, ph[i].Regions[ri].Admitted = bt[ri].requests, bt[ri].admitted
			}
		}
		for ri, rt := range o.phases[i].byRule {
			ph[i].Rules = append(ph[i].Rules, RuleFigures{Rule: e.rules[ri].Name, Requests: rt.requests, Admitted: rt.admitted,
				OverLimitAdmits: rt.overLimit, WronglyRejected: rt.wronglyRejected, MaxAdmittedRatio: round(rt.maxRatio)})
		}
	}
	return figures(o.phases, o.run.flat()), ph
}

func (e *engine) result() *Result {
	seed := e.sc.Seed
	if e.opts.Seed != nil {
		seed = *e.opts.Seed
	}
	r := Report{
		Scenario:   e.sc.Name,
		Seed:       seed,
		Policy:     e.policy,
		DurationMS: e.end / 1e6,
		Unserved:   e.unserved,
		Replication: Replication{
			MessagesPerSPerPoP: map[string]float64{},
			BytesPerSPerPoP:    map[string]float64{},
		},
		ConvergenceMS: []float64{},
	}
	r.Figures, r.Phases = e.phaseFigures(e.fleet)
	if e.cOracle != nil {
		r.Central.Figures, r.Central.Phases = e.phaseFigures(e.cOracle)
	}
	for _, p := range e.probes {
		r.ConvergenceMS = append(r.ConvergenceMS, p.result)
	}
	secs := float64(e.end) / 1e9
	var out sent
	for _, p := range e.pops {
		r.Replication.MessagesPerSPerPoP[p.id.String()] = round(float64(p.acct.messages) / secs)
		r.Replication.BytesPerSPerPoP[p.id.String()] = round(float64(p.acct.bytes) / secs)
		out.messages += p.global.messages
		out.bytes += p.global.bytes
	}
	nodeSecs := secs * float64(len(e.nodes))
	r.Replication.NodeInboundMessagesPerS = round(float64(e.inbound.messages) / nodeSecs)
	r.Replication.NodeInboundEntriesPerS = round(float64(e.inbound.entries) / nodeSecs)
	r.Replication.NodeInboundBytesPerS = round(float64(e.inbound.bytes) / nodeSecs)
	r.Replication.NodeInterRegionCountMessagesPerS = round(float64(e.inboundFar.messages) / nodeSecs)
	r.Replication.NodeInterRegionEntriesPerS = round(float64(e.inboundFar.entries) / nodeSecs)
	r.Replication.NodeInboundByKind = map[string]Inbound{}
	for l, kinds := range e.inboundBy {
		for k, by := range kinds {
			if by.messages == 0 {
				continue
			}
			name := repl.Kind(k).String()
			if l == 1 {
				name = "region " + name
			}
			r.Replication.NodeInboundByKind[name] = Inbound{
				MessagesPerS: round(float64(by.messages) / nodeSecs),
				EntriesPerS:  round(float64(by.entries) / nodeSecs),
				BytesPerS:    round(float64(by.bytes) / nodeSecs),
			}
		}
	}
	popSecs := secs * float64(len(e.pops))
	r.Replication.PoPOutboundMessagesPerS = round(float64(out.messages) / popSecs)
	r.Replication.PoPOutboundBytesPerS = round(float64(out.bytes) / popSecs)
	return &Result{Report: r, Regions: e.regions, Series: e.series}
}

// sampleSeries adds one time-series row per tracked key at t.
func (e *engine) sampleSeries(t int64) {
	part := false
	for _, p := range e.phases {
		if p.name == "partitioned" && p.from <= t && t < p.to {
			part = true
		}
	}
	for _, k := range e.tracked {
		row := SeriesRow{TMS: t / 1e6, Rule: k.ruleName, Key: k.key, Limit: k.limit, True: e.fleet.trailing(k, t), Partitioned: part}
		if e.cOracle != nil {
			row.Central = e.cOracle.trailing(k, t)
		}
		row.Views = make([]float64, len(e.regions))
		for i := range row.Views {
			row.Views[i] = -1
		}
		for _, nd := range e.nodes {
			if !nd.up {
				continue
			}
			v, err := nd.n.View(e.fleetNow(nd, t), k.ruleName, k.key)
			if err != nil {
				continue
			}
			row.Views[nd.region] = max(row.Views[nd.region], round(v.Estimate))
		}
		e.series = append(e.series, row)
	}
}

// WriteJSON writes reports as indented JSON: one object, or {"runs": [...]}
// when there are several.
func WriteJSON(w io.Writer, reports []Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if len(reports) == 1 {
		return enc.Encode(reports[0])
	}
	return enc.Encode(struct {
		Runs []Report `json:"runs"`
	}{reports})
}

// WriteTable writes reports as a readable text report: the summary
// (Summary) first, then the phases table, and the replication, per-region
// and per-rule figures. One report gets the full table, one row per phase
// and decider; several (-compare) get it compactly, one row per phase with
// each decider's figures side by side.
func WriteTable(w io.Writer, reports []Report) error {
	r0 := reports[0]
	fmt.Fprintf(w, "scenario %s  seed %d  duration %s\n\n", r0.Scenario, r0.Seed, fmtMS(r0.DurationMS))
	fmt.Fprintf(w, "%s\n\n", wrap(Summary(reports), 100))
	var err error
	if len(reports) > 1 {
		err = writeCompactTable(w, reports)
	} else {
		err = writeFullTable(w, reports)
	}
	if err != nil {
		return err
	}
	for _, r := range reports {
		fmt.Fprintf(w, "\n[%s] convergence after heal (ms): %s\n", r.Policy, fmtFloats(r.ConvergenceMS))
		rp := &r.Replication
		fmt.Fprintf(w, "[%s] per node from other PoPs: %.0f msg/s, %.0f entries/s, %.0f bytes/s; per PoP to other PoPs: %.0f msg/s, %.0f bytes/s\n",
			r.Policy, rp.NodeInboundMessagesPerS, rp.NodeInboundEntriesPerS, rp.NodeInboundBytesPerS, rp.PoPOutboundMessagesPerS, rp.PoPOutboundBytesPerS)
		fmt.Fprintf(w, "[%s] per node from other regions: %.0f messages of counts/s, %.0f entries/s\n",
			r.Policy, rp.NodeInterRegionCountMessagesPerS, rp.NodeInterRegionEntriesPerS)
		if len(rp.MessagesPerSPerPoP) <= 12 {
			fmt.Fprintf(w, "[%s] replication per PoP (msg/s, bytes/s):", r.Policy)
			for _, id := range sortedKeys(rp.MessagesPerSPerPoP) {
				fmt.Fprintf(w, " %s %.0f %.0f;", id, rp.MessagesPerSPerPoP[id], rp.BytesPerSPerPoP[id])
			}
			fmt.Fprintln(w)
		}
		for i, p := range r.Phases {
			if p.Name != "partitioned" || len(r0.Central.Phases) <= i || len(p.Regions) < 2 {
				continue
			}
			fmt.Fprintf(w, "[%s] %s admitted by region (fleet / central):", r.Policy, p.Name)
			for ri, rf := range p.Regions {
				c := r0.Central.Phases[i].Regions[ri].Admitted
				fmt.Fprintf(w, " %s %d / %d (%s);", rf.Region, rf.Admitted, c, fmtRatio(rf.Admitted, c))
			}
			fmt.Fprintln(w)
		}
		for i, p := range r.Phases {
			if len(p.Rules) == 0 {
				continue
			}
			fmt.Fprintf(w, "[%s] %s by rule, admitted (central) and max a/l (central):", r.Policy, p.Name)
			for ri, rf := range p.Rules {
				var c RuleFigures
				if len(r0.Central.Phases) > i && ri < len(r0.Central.Phases[i].Rules) {
					c = r0.Central.Phases[i].Rules[ri]
				}
				fmt.Fprintf(w, " %s %d (%d) %.3f (%.3f);", rf.Rule, rf.Admitted, c.Admitted, rf.MaxAdmittedRatio, c.MaxAdmittedRatio)
			}
			fmt.Fprintln(w)
		}
		if r.Unserved > 0 {
			fmt.Fprintf(w, "[%s] unserved (every PoP down): %d\n", r.Policy, r.Unserved)
		}
		if r.SimRequestsPerS > 0 {
			fmt.Fprintf(w, "[%s] simulated %.2fM requests/s\n", r.Policy, r.SimRequestsPerS/1e6)
		}
	}
	fmt.Fprintln(w, "\na/l: exact admitted cost in the trailing window / limit (max over instants; p99, mean over keys x windows)")
	_, err = fmt.Fprintln(w, wrap(centralMeaning, 100))
	return err
}

// writeFullTable writes one row per phase and decider.
func writeFullTable(w io.Writer, reports []Report) error {
	r0 := reports[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"phase", "span", "decider", "requests", "admitted", "over-limit", "wrong-rej", "max a/l", "p99 a/l", "mean a/l"}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	row := func(name, span, who string, f Figures) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d (%.2f%%)\t%d (%.2f%%)\t%.3f\t%.3f\t%.3f\t\n",
			name, span, who, f.Requests, f.Admitted, f.OverLimitAdmits, 100*f.OverLimitFraction,
			f.WronglyRejected, 100*f.WronglyRejectedFraction, f.MaxAdmittedRatio, f.P99AdmittedRatio, f.MeanAdmittedRatio)
	}
	span := func(a, b int64) string { return fmtMS(a) + "-" + fmtMS(b) }
	for i, p := range r0.Phases {
		for _, r := range reports {
			row(p.Name, span(p.FromMS, p.ToMS), r.Policy, r.Phases[i].Figures)
		}
		if len(r0.Central.Phases) > i {
			row(p.Name, span(p.FromMS, p.ToMS), "central", r0.Central.Phases[i].Figures)
		}
	}
	for _, r := range reports {
		row("all", span(0, r0.DurationMS), r.Policy, r.Figures)
	}
	row("all", span(0, r0.DurationMS), "central", r0.Central.Figures)
	return tw.Flush()
}

// writeCompactTable writes one row per phase, each decider's admitted,
// max a/l, over-limit and wrong-reject shares side by side.
func writeCompactTable(w io.Writer, reports []Report) error {
	r0 := reports[0]
	who := make([]string, 0, len(reports)+1)
	for _, r := range reports {
		who = append(who, r.Policy)
	}
	who = append(who, "central")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	groups := []string{"admitted", "max a/l", "over-limit %", "wrong-rej %"}
	h1, h2 := []string{"", ""}, []string{"phase", "span"}
	for _, g := range groups {
		for i, d := range who {
			if i == 0 {
				h1 = append(h1, g)
			} else {
				h1 = append(h1, "")
			}
			h2 = append(h2, d)
		}
	}
	fmt.Fprintln(tw, strings.Join(h1, "\t")+"\t")
	fmt.Fprintln(tw, strings.Join(h2, "\t")+"\t")
	row := func(name, span string, fs []Figures) {
		cells := []string{name, span}
		for _, f := range fs {
			cells = append(cells, fmt.Sprint(f.Admitted))
		}
		for _, f := range fs {
			cells = append(cells, fmt.Sprintf("%.3f", f.MaxAdmittedRatio))
		}
		for _, f := range fs {
			cells = append(cells, fmt.Sprintf("%.1f", 100*f.OverLimitFraction))
		}
		for _, f := range fs {
			cells = append(cells, fmt.Sprintf("%.1f", 100*f.WronglyRejectedFraction))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	for i, p := range r0.Phases {
		var fs []Figures
		for _, r := range reports {
			fs = append(fs, r.Phases[i].Figures)
		}
		var c Figures
		if len(r0.Central.Phases) > i {
			c = r0.Central.Phases[i].Figures
		}
		row(p.Name, fmtMS(p.FromMS)+"-"+fmtMS(p.ToMS), append(fs, c))
	}
	var fs []Figures
	for _, r := range reports {
		fs = append(fs, r.Figures)
	}
	row("all", "0s-"+fmtMS(r0.DurationMS), append(fs, r0.Central.Figures))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "over-limit %: of the admits, those over the limit; wrong-rej %: of the requests, those rejected though they fit")
	return err
}

// wrap breaks s into lines of at most width bytes, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if n+1+len(word) > width {
				b.WriteByte('\n')
				n = 0
			} else {
				b.WriteByte(' ')
				n++
			}
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

func fmtRatio(a, b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

func fmtMS(ms int64) string {
	if ms%1000 == 0 {
		return fmt.Sprintf("%ds", ms/1000)
	}
	return fmt.Sprintf("%.3fs", float64(ms)/1000)
}

func fmtFloats(xs []float64) string {
	if len(xs) == 0 {
		return "none (no heal)"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		if x < 0 {
			s[i] = "not converged"
		} else {
			s[i] = fmt.Sprintf("%g", x)
		}
	}
	return strings.Join(s, ", ")
}
