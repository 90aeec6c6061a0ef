// Command chaos runs a simulator scenario on a live fleet of edge
// processes under faults (embedded NATS linked by gateways through
// fault-injecting proxies, memberlist, kill -9, restarts, pauses), and
// beside it in the simulator, and prints both measured the same way.
//
//	chaos -scenario live/cut-share [-seed N] [-json FILE] [-svg FILE] [-keep-logs DIR]
//	chaos -soak 30m [-seed N] [-json FILE]
//
// It builds cmd/edge (run it inside the module), starts every process on
// free ports of 127.0.0.1 and stops each by its PID when it returns, on
// failure and on SIGINT. See docs/chaos.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/geolimit/geolimit/internal/chaos"
	"github.com/geolimit/geolimit/scenarios"
	"github.com/geolimit/geolimit/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if msg := err.Error(); !errors.Is(err, flag.ErrHelp) {
			if !strings.HasPrefix(msg, "chaos: ") && !strings.HasPrefix(msg, "sim: ") {
				msg = "chaos: " + msg
			}
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "", "scenario `file` or built-in name (e.g. live/cut-share)")
	seed := fs.Uint64("seed", 0, "override the scenario's seed")
	jsonOut := fs.String("json", "", "write the JSON report to `file`")
	svgOut := fs.String("svg", "", "write an SVG of live and simulated admitted/limit over time to `file`")
	keepLogs := fs.String("keep-logs", "", "copy the nodes' configs and logs to `dir`")
	soak := fs.Duration("soak", 0, "soak mode: seeded random faults on a small fleet under steady load for this `duration`")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	fs.Usage = func() {
		var live []string
		for _, n := range scenarios.Names() {
			if strings.HasPrefix(n, "live/") {
				live = append(live, n)
			}
		}
		fmt.Fprintf(fs.Output(), "usage: chaos -scenario FILE|NAME [flags] | chaos -soak DURATION [flags]\n\nlive scenarios: %s\n\nflags:\n", strings.Join(live, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	opts := chaos.Options{KeepLogs: *keepLogs}
	if !*quiet {
		opts.Logf = func(format string, a ...any) {
			fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["seed"] {
		opts.Seed = seed
	}
	var rep *chaos.Report
	var err error
	switch {
	case *soak != 0 && *scenario != "":
		return errors.New("-soak and -scenario: give one of them")
	case *soak < 0:
		return fmt.Errorf("-soak: must be positive, got %s", *soak)
	case *soak > 0:
		s := uint64(1)
		if opts.Seed != nil {
			s = *opts.Seed
		}
		rep, err = chaos.RunSoak(ctx, *soak, s, opts)
	case *scenario == "":
		fs.Usage()
		return errors.New("-scenario: required")
	default:
		sc, lerr := loadScenario(*scenario)
		if lerr != nil {
			return lerr
		}
		rep, err = chaos.Run(ctx, sc, opts)
	}
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if err := write(*jsonOut, rep.WriteJSON); err != nil {
		return err
	}
	return write(*svgOut, rep.WriteSVG)
}

func write(path string, f func(io.Writer) error) error {
	if path == "" {
		return nil
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f(out); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
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
	return nil, fmt.Errorf("-scenario %q: no such file, nor a built-in scenario", name)
}
