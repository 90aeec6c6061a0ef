// Command sim runs a geolimit partition scenario on a simulated network with
// the real node core, and reports how far over its limits the fleet drifts.
//
//	go run ./cmd/sim -list
//	go run ./cmd/sim -scenario two-regions-cut
//	go run ./cmd/sim -scenario scenarios/two-regions-cut.yaml -json out.json -csv out.csv -svg out.svg
//	go run ./cmd/sim -scenario my-scenario.yaml -compare keep,share
//	go run ./cmd/sim -scenario two-regions-cut -compare keep,share -html report.html
//
// -scenario takes a file, or the name of a built-in scenario (package
// scenarios); -list lists those.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/scenarios"
	"github.com/geolimit/geolimit/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			msg := err.Error()
			if !strings.HasPrefix(msg, "sim: ") {
				msg = "sim: " + msg
			}
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		scenario = fs.String("scenario", "", "scenario file (YAML), or the name of a built-in scenario (see -list); required")
		list     = fs.Bool("list", false, "list the built-in scenarios and exit")
		jsonOut  = fs.String("json", "", "write the full report as JSON to this file")
		csvOut   = fs.String("csv", "", "write the time series as CSV to this file")
		svgOut   = fs.String("svg", "", "write a plot of true admitted vs limit as SVG to this file")
		htmlOut  = fs.String("html", "", "write one self-contained HTML report (summary, plot, phases, regions) to this file")
		logOut   = fs.String("log", "", "write every request as CSV (t_ms,region,pop,node,rule,key,cost,admitted) to this file")
		compare  = fs.String("compare", "", "run under each of these partition policies side by side, e.g. keep,share")
		seed     = fs.Int64("seed", -1, "override the scenario's seed")
		scale    = fs.Float64("rate-scale", 1, "multiply every traffic rate by this factor")
		noTiming = fs.Bool("no-timing", false, "leave sim_requests_per_s at 0 so that reports are byte-identical")
		allow    = fs.String("near-limit-allowance", "", "override the scenario's replication.near_limit_allowance: on or off")
		sparse   = fs.String("sparse-updates", "", "override the scenario's replication.sparse_updates: on or off")
		voices   = fs.String("region-voices", "", "override the scenario's replication.region_voices: on or off")
		quiet    = fs.Bool("quiet", false, "no progress line on stderr")
		huge     = fs.Bool("huge-pages", true, "ask the kernel for huge pages for the fleet's memory (Linux; faster large fleets, same reports)")
		cpuProf  = fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
		memProf  = fs.String("memprofile", "", "write a heap profile at the end of the run to this file (go tool pprof)")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sim -scenario FILE|NAME [flags]\n\nbuilt-in scenarios: %s\n\nflags:\n", strings.Join(scenarios.Names(), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *list {
		return listScenarios(stdout)
	}
	if *scale <= 0 {
		return fmt.Errorf("-rate-scale %g: must be positive", *scale)
	}
	if *scenario == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-scenario FILE is required and no positional arguments are taken")
	}
	sc, err := loadScenario(*scenario)
	if err != nil {
		return err
	}
	for _, o := range []struct {
		flag, v string
		set     func(bool)
	}{
		{"near-limit-allowance", *allow, func(on bool) { sc.Replication.NearLimitAllowance = &on }},
		{"sparse-updates", *sparse, func(on bool) { sc.Replication.SparseUpdates = &on }},
		{"region-voices", *voices, func(on bool) { sc.Replication.RegionVoices = new(on) }},
	} {
		switch o.v {
		case "":
		case "on", "off":
			o.set(o.v == "on")
		default:
			return fmt.Errorf("-%s %q: want on or off", o.flag, o.v)
		}
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProf != "" {
		defer func() {
			if f, err := os.Create(*memProf); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *huge {
		stop := make(chan struct{})
		defer close(stop)
		go hugePages(stop) // hugepages_linux.go
	}
	policies := []string{""}
	if *compare != "" {
		policies = strings.Split(*compare, ",")
		for _, p := range policies {
			if _, err := pop.ParsePolicy(p); err != nil {
				return fmt.Errorf("-compare: %w", err)
			}
		}
		if *logOut != "" && len(policies) > 1 {
			return errors.New("-log takes one run; use it without -compare or with one policy")
		}
	}
	opts := sim.Options{RateScale: *scale}
	if *seed >= 0 {
		s := uint64(*seed)
		opts.Seed = &s
	}
	if !*noTiming {
		opts.WallClock = time.Now
	}
	if *logOut != "" {
		f, err := os.Create(*logOut)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.WriteString(f, "t_ms,region,pop,node,rule,key,cost,admitted\n"); err != nil {
			return err
		}
		opts.Log = f
	}
	var reports []sim.Report
	var results []*sim.Result
	for _, p := range policies {
		if err := ctx.Err(); err != nil {
			return err
		}
		opts.Policy = p
		began := time.Now()
		shown := false
		if !*quiet {
			opts.Progress = func(done, total time.Duration, requests uint64) {
				if time.Since(began) < 2*time.Second {
					return
				}
				shown = true
				fmt.Fprintf(stderr, "\r%s %s: %3.0f%% of %s simulated, %d requests", sc.Name, label(p), 100*done.Seconds()/total.Seconds(), total, requests)
			}
		}
		res, err := sim.RunContext(ctx, sc, opts)
		if shown {
			fmt.Fprintln(stderr)
		}
		if err != nil {
			return err
		}
		reports = append(reports, res.Report)
		results = append(results, res)
	}
	if err := sim.WriteTable(stdout, reports); err != nil {
		return err
	}
	write := func(path string, fn func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write(*jsonOut, func(w io.Writer) error { return sim.WriteJSON(w, reports) }); err != nil {
		return err
	}
	if err := write(*csvOut, func(w io.Writer) error { return sim.WriteCSV(w, results...) }); err != nil {
		return err
	}
	if err := write(*htmlOut, func(w io.Writer) error { return sim.WriteHTML(w, results...) }); err != nil {
		return err
	}
	return write(*svgOut, func(w io.Writer) error { return sim.WriteSVG(w, results...) })
}

func label(p string) string {
	if p == "" {
		return "as configured"
	}
	return p
}

// loadScenario reads the scenario file at name or, when there is none, the
// built-in scenario of that name.
func loadScenario(name string) (*sim.Scenario, error) {
	if _, err := os.Stat(name); err == nil {
		return sim.Load(name)
	}
	if b, ok := scenarios.Get(name); ok {
		return sim.Parse(b)
	}
	return nil, fmt.Errorf("-scenario %q: no such file, nor a built-in scenario (sim -list lists them)", name)
}

// listScenarios writes each built-in scenario's name and the first line of
// its description.
func listScenarios(w io.Writer) error {
	for _, n := range scenarios.Names() {
		b, _ := scenarios.Get(n)
		sc, err := sim.Parse(b)
		if err != nil {
			return fmt.Errorf("built-in scenario %s: %w", n, err)
		}
		desc, _, _ := strings.Cut(strings.Join(strings.Fields(sc.Description), " "), ". ")
		if len(desc) > 100 {
			desc = desc[:strings.LastIndexByte(desc[:100], ' ')] + " ..."
		}
		fmt.Fprintf(w, "%-28s %s\n", n, strings.TrimSuffix(desc, "."))
	}
	return nil
}
