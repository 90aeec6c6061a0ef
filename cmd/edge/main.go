// Command edge is the geolimit edge daemon: a rate-limit decision API and
// reverse proxy whose counts replicate across PoPs and regions.
//
//	edge                       # one node, embedded NATS, demo rules, API on 127.0.0.1:8080
//	edge -api 127.0.0.1:8081 -nats 127.0.0.1:4223   # the same on other ports
//	edge -config edge.yaml     # run with a config file (reloaded on SIGHUP and on change)
//	edge -config edge.yaml -check-config
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/internal/edgerepl"
	"github.com/geolimit/geolimit/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "edge:", err)
		}
		os.Exit(1)
	}
}

// newReplicator builds the replication runtime (memberlist + NATS); see
// edgerepl. nil runs every node as a one-node PoP without replication.
var newReplicator server.NewReplicatorFunc = edgerepl.New

// run is the whole daemon: it returns when ctx is done (after a graceful
// shutdown) or on a startup error. SIGHUP reloads the config file.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config `file`; empty runs one node with the demo rules")
	check := fs.Bool("check-config", false, "validate the config and exit")
	apiAddr := fs.String("api", "", "listen `address` of the decision API, over listen.api")
	natsAddr := fs.String("nats", "", "client listen `address` of the embedded NATS server, over nats.embedded.listen")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	format := fs.String("log-format", "text", "log `format`: text or json")
	watch := fs.Duration("watch-interval", time.Second, "how often the config file is polled for changes (0 turns polling off)")
	bare := fs.Bool("bare-baseline", false, "benchmark baseline: serve POST /v1/check with a fixed JSON answer and nothing else, on -bare-listen")
	bareListen := fs.String("bare-listen", "127.0.0.1:8081", "listen `address` for -bare-baseline")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to `file` until exit")
	showVersion := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, versionLine())
		return nil
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch *format {
	case "text":
		h = slog.NewTextHandler(stderr, hopts)
	case "json":
		h = slog.NewJSONHandler(stderr, hopts)
	default:
		return fmt.Errorf("-log-format: unknown format %q (want text or json)", *format)
	}
	log := slog.New(h)
	if *bare {
		return runBare(ctx, *bareListen, stdout, log)
	}

	var cfg *config.Config
	if *cfgPath == "" {
		cfg = config.Demo()
	} else {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	if *apiAddr != "" || *natsAddr != "" {
		if *apiAddr != "" {
			cfg.Listen.API = *apiAddr
		}
		if *natsAddr != "" {
			if cfg.NATS.URL != "" || cfg.NATS.Disabled {
				return errors.New("-nats: the config runs no embedded NATS server (nats.url or nats.disabled is set)")
			}
			cfg.NATS.Embedded.Listen = *natsAddr
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("-api/-nats: %w", err)
		}
	}
	if *check {
		if *cfgPath == "" {
			// The demo config is checked here as the daemon will check it.
			if err := cfg.Validate(); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "config ok: %d rules\n", len(cfg.Rules))
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		return nil
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The garbage collector works harder near the budget, not past it.
		debug.SetMemoryLimit(cfg.Limits.MemoryBudget())
	}
	self := cfg.Node.Replica(uint64(time.Now().UnixNano()))
	wi := *watch
	if wi <= 0 {
		wi = -1
	}
	app, err := server.New(server.Options{
		Config:        cfg,
		ConfigPath:    *cfgPath,
		Self:          self,
		Logger:        log,
		Version:       version(),
		WatchInterval: wi,
		NewReplicator: newReplicator,
	})
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if err := app.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "api listening on http://%s\n", app.APIAddr())
	if a := app.ProxyAddr(); a != nil {
		fmt.Fprintf(stdout, "proxy listening on http://%s\n", a)
	}
	if a := app.ForwardAuthAddr(); a != nil {
		fmt.Fprintf(stdout, "forward auth listening on http://%s\n", a)
	}
	if a := app.GRPCAddr(); a != nil {
		fmt.Fprintf(stdout, "rate limit service (gRPC) listening on %s\n", a)
	}
	if u := app.NATSURL(); u != "" {
		fmt.Fprintf(stdout, "nats on %s\n", u)
	}
	for {
		select {
		case <-hup:
			if *cfgPath == "" {
				log.Warn("SIGHUP ignored: no config file")
				continue
			}
			_ = app.Reload() // logs its reason; the old config keeps serving
		case err := <-app.Err():
			sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout.D())
			defer cancel()
			return errors.Join(err, app.Shutdown(sctx))
		case <-ctx.Done():
			log.Info("shutting down")
			sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout.D())
			defer cancel()
			return app.Shutdown(sctx)
		}
	}
}

// version is the module version from the build info: a tag such as v0.3.0
// when installed with go install at a version, a pseudo-version, or
// "(devel)" when built from a checkout.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// versionLine is what -version prints: the module version, the VCS commit
// and time the binary was built from (with "+dirty" for uncommitted
// changes), the Go version and the platform, all from the build info.
func versionLine() string {
	commit, at, dirty := "unknown", "", false
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if dirty {
		commit += "+dirty"
	}
	line := fmt.Sprintf("edge %s commit %s", version(), commit)
	if at != "" {
		line += " (" + at + ")"
	}
	return line + fmt.Sprintf(" %s %s/%s", goVersion, runtime.GOOS, runtime.GOARCH)
}
