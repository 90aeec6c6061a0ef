package sim

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/geolimit/geolimit/pop"
)

// Decision is one decided request: a row of the per-request log
// (t_ms,region,pop,node,rule,key,cost,admitted), or a decision taken by a
// live fleet on the same arrivals.
type Decision struct {
	// T is the time of the decision from the run's start.
	T      time.Duration
	Region string
	PoP    string
	Node   string
	Rule   string
	Key    string
	Cost   uint64
	// Admitted is the decider's answer.
	Admitted bool
}

// ReadLog parses a per-request log as Options.Log writes it (rows only, or
// with the header line t_ms,region,pop,node,rule,key,cost,admitted).
func ReadLog(r io.Reader) ([]Decision, error) {
	var out []Decision
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if s == "" || strings.HasPrefix(s, "t_ms,") {
			continue
		}
		f := strings.Split(s, ",")
		if len(f) != 8 {
			return nil, fmt.Errorf("sim: log line %d: want 8 fields, got %d", line, len(f))
		}
		ms, frac, _ := strings.Cut(f[0], ".")
		whole, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || whole < 0 {
			return nil, fmt.Errorf("sim: log line %d: bad t_ms %q", line, f[0])
		}
		ns := whole * 1e6
		if frac != "" {
			if len(frac) > 6 {
				return nil, fmt.Errorf("sim: log line %d: bad t_ms %q", line, f[0])
			}
			v, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("sim: log line %d: bad t_ms %q", line, f[0])
			}
			ns += v
		}
		cost, err := strconv.ParseUint(f[6], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sim: log line %d: bad cost %q", line, f[6])
		}
		if f[7] != "0" && f[7] != "1" {
			return nil, fmt.Errorf("sim: log line %d: admitted must be 0 or 1, got %q", line, f[7])
		}
		out = append(out, Decision{T: time.Duration(ns), Region: f[1], PoP: f[2], Node: f[3], Rule: f[4], Key: f[5], Cost: cost, Admitted: f[7] == "1"})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: log: %w", err)
	}
	return out, nil
}

// Replay measures decisions taken on sc's arrivals (by the simulator, or by
// a live fleet running the same scenario) exactly as a run measures its own:
// the fleet's figures against the exact trailing-window totals, per phase
// and per region, and the same arrivals decided by one central node with
// zero latency, judged the same way. Decisions may come in any order; they
// are measured in time order (file order among equal times). Replaying the
// log of a run gives that run's figures (its replication, convergence and
// unserved figures aside, which Replay leaves empty). Rules of kind
// concurrency are not supported. The time series has the exact fleet and
// central trailing-window totals of the tracked keys (no views: Replay
// has no nodes to ask).
func Replay(sc *Scenario, ds []Decision) (*Result, error) {
	e, err := newEngine(sc, Options{})
	if err != nil {
		return nil, err
	}
	for _, r := range e.rules {
		if r.Kind == pop.Concurrency {
			return nil, fmt.Errorf("sim: replay: rule %q: concurrency rules cannot be replayed", r.Name)
		}
	}
	byKey := map[string]*keyInfo{}
	for _, k := range e.keys {
		byKey[k.ruleName+"\x00"+k.key] = k
	}
	region := map[string]int{}
	for i, r := range e.regions {
		region[r] = i
	}
	ds = append([]Decision(nil), ds...)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].T < ds[j].T })
	// Only the measuring events run: phases and admitted/limit samples.
	until := func(t int64) {
		for e.q.peek() <= t {
			ev := e.q.pop()
			e.now = ev.at
			switch ev.kind {
			case evPhase, evRuleSample:
				e.handle(ev)
			case evSeries:
				e.sampleTotals(ev.at)
				if step := int64(e.sc.Output.Step); ev.at+step <= e.end {
					ev.at += step
					e.q.push(ev)
				}
			}
		}
	}
	for i, d := range ds {
		t := int64(d.T)
		if t < 0 || t >= e.end {
			return nil, fmt.Errorf("sim: replay: decision %d at %s is outside the run (0-%s)", i, d.T, sc.Duration)
		}
		k := byKey[d.Rule+"\x00"+d.Key]
		if k == nil {
			return nil, fmt.Errorf("sim: replay: decision %d: rule %q key %q is not one of the scenario's", i, d.Rule, d.Key)
		}
		ri, ok := region[d.Region]
		if !ok {
			return nil, fmt.Errorf("sim: replay: decision %d: unknown region %q", i, d.Region)
		}
		until(t)
		e.now = t
		e.fleet.judge(k, t, d.Cost, d.Admitted)
		e.fleet.served(ri, d.Admitted)
		cd, err := e.central.Decide(Epoch+t, k.ruleName, k.key, d.Cost)
		if err != nil {
			return nil, fmt.Errorf("sim: replay: central decide: %w", err)
		}
		e.cOracle.judge(k, t, d.Cost, cd.Allowed)
		e.cOracle.served(ri, cd.Allowed)
	}
	until(e.end)
	if e.err != nil {
		return nil, e.err
	}
	e.probes = nil
	res := e.result()
	res.Report.Replication = Replication{}
	return res, nil
}

// sampleTotals adds one time-series row per tracked key at t, without views.
func (e *engine) sampleTotals(t int64) {
	part := false
	for _, p := range e.phases {
		if p.name == "partitioned" && p.from <= t && t < p.to {
			part = true
		}
	}
	for _, k := range e.tracked {
		e.series = append(e.series, SeriesRow{TMS: t / 1e6, Rule: k.ruleName, Key: k.key, Limit: k.limit,
			True: e.fleet.trailing(k, t), Central: e.cOracle.trailing(k, t), Partitioned: part})
	}
}
