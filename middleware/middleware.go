// Package middleware runs geolimit inside a Go program: net/http middleware
// that decides every request against the rules exactly as the edge daemon's
// proxy listener does, with the same rule table, key extraction, trusted
// proxies, AND semantics and answers.
//
//	cfg := middleware.Standalone(config.Rule{
//		Name: "api", Match: config.Match{PathPrefix: "/api"},
//		Limit: 100, Window: config.Duration(time.Minute),
//	})
//	lim, err := middleware.New(cfg)
//	if err != nil {
//		return err
//	}
//	if err := lim.Start(ctx); err != nil {
//		return err
//	}
//	defer lim.Close(context.Background())
//	http.ListenAndServe(":8000", lim.Handler(mux))
//
// Every rule that applies to a request is checked (AND). A request denied
// by one enforce rule spends nothing of the others and is answered 429 with
// Retry-After, the RateLimit headers and a JSON body; shadow rules count
// but never deny. An allowed request reaches the wrapped handler with the
// RateLimit headers of its binding rule set. A request that sends a header
// a rule keys on more than once is answered 400. A concurrency rule
// (Kind "concurrency") holds a slot while the wrapped handler serves the
// request and gives it back when the handler returns, however it returns.
// With a shedding section, a request of a low priority class that arrives
// while too many are in flight is answered 503 with Retry-After before any
// rule counts it.
//
// The client address is the socket peer (http.Request.RemoteAddr) or,
// when the peer is in proxy.trusted_proxies, the rightmost address of
// X-Forwarded-For that is not a trusted proxy.
//
// The config is the edge daemon's (config.Config, as config.Load reads it
// from YAML); its listen section is ignored, for the Limiter opens no
// listener of its own (a config built in Go may leave it empty; a file read
// by config.Load is checked as the daemon would check it). Decisions are
// timed as geolimit_decision_duration_seconds{endpoint="middleware"}.
// Standalone builds a config for a single process (nats.disabled).
// With NATS enabled, Start connects to nats.url and replicates counts
// between the PoPs like the daemon, so that Limiters in several PoPs, and
// edge daemons, share global rules. A Limiter starts no NATS server of its
// own: New refuses NATS enabled without nats.url, and a program that uses
// this package links neither nats-server nor gRPC (it runs the daemon's
// engine, package server/engine, without the daemon's listeners).
package middleware

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/internal/edgerepl"
	"github.com/geolimit/geolimit/server/engine"
	"github.com/geolimit/geolimit/server/proxy"
)

// Options are the optional settings of NewWithOptions.
type Options struct {
	// Logger receives the Limiter's logs; nil discards them.
	Logger *slog.Logger
	// ConfigPath is the YAML file cfg was loaded from (config.Load): Reload
	// reads it again and it is polled every second; on a change its rules,
	// trusted proxies and gossip keys apply without a restart, as in the
	// edge daemon. Empty disables both.
	ConfigPath string
}

// Limiter is a rate limiter embedded in a Go program. Its methods are safe
// for concurrent use; Start and Close are called once each.
type Limiter struct {
	app     *engine.App
	fronts  *proxy.FrontEnds
	natsURL string
}

// ErrNoNATSURL is New's error for a config with NATS enabled and no
// nats.url: a Limiter replicates through a NATS server it connects to and
// starts none of its own.
var ErrNoNATSURL = errors.New("middleware: nats.url: required unless nats.disabled: a Limiter starts no NATS server of its own; " +
	"set nats.url to a NATS server (an edge daemon's embedded one, or a nats-server), or nats.disabled: true (Standalone)")

// New builds a Limiter from cfg: omitted rule fields take the defaults
// config.Load gives them (cost 1, key ip, scope global, mode enforce,
// on_partition keep), then cfg is validated. cfg itself is not modified.
func New(cfg *config.Config) (*Limiter, error) {
	return NewWithOptions(cfg, Options{})
}

// NewWithOptions is New with options.
func NewWithOptions(cfg *config.Config, o Options) (*Limiter, error) {
	if cfg == nil {
		return nil, errors.New("middleware: config required")
	}
	if !cfg.NATS.Disabled && cfg.NATS.URL == "" {
		return nil, ErrNoNATSURL
	}
	c := *cfg
	c.Rules = slices.Clone(cfg.Rules)
	for i := range c.Rules {
		c.Rules[i].Key = slices.Clone(c.Rules[i].Key)
	}
	c.ApplyRuleDefaults()
	self := c.Node.Replica(uint64(time.Now().UnixNano()))
	app, err := engine.New(engine.Options{
		Config:        &c,
		ConfigPath:    o.ConfigPath,
		Self:          self,
		Logger:        o.Logger,
		WatchInterval: watchInterval(o.ConfigPath),
		NewReplicator: edgerepl.New,
		IgnoreListen:  true,
	})
	if err != nil {
		return nil, err
	}
	fronts := proxy.New(app.Env(), proxy.Metrics{LatencyMiddleware: app.Latency("middleware")})
	return &Limiter{app: app, fronts: fronts, natsURL: c.NATS.URL}, nil
}

func watchInterval(path string) time.Duration {
	if path == "" {
		return -1
	}
	return time.Second
}

// Standalone returns the default config with rules and NATS disabled: one
// process counting on its own, with no link to other processes.
func Standalone(rules ...config.Rule) *config.Config {
	c := config.DefaultConfig()
	c.NATS.Disabled = true
	c.Rules = rules
	return c
}

// Start starts what the Limiter runs besides the handler: replication
// over nats.url (unless nats.disabled), the tick loop that forgets expired
// counts, and the config watcher. Handler works before Start, but counts
// are replicated only once it has run.
func (l *Limiter) Start(ctx context.Context) error {
	return l.app.Start(ctx, engine.NATS{URL: l.natsURL})
}

// Handler wraps next: each request is decided against the rules first, and
// only the allowed ones reach next (see the package documentation).
func (l *Limiter) Handler(next http.Handler) http.Handler { return l.fronts.Middleware(next) }

// Reload re-reads Options.ConfigPath and applies its rules, trusted
// proxies and shedding section; an invalid file changes nothing and is
// returned as an error.
func (l *Limiter) Reload() error { return l.app.Reload() }

// App is the engine behind the Limiter (the edge daemon runs the same),
// for its node, clock and Prometheus registry.
func (l *Limiter) App() *engine.App { return l.app }

// Close stops replication after a final flush, and the loops. It is
// idempotent.
func (l *Limiter) Close(ctx context.Context) error { return l.app.Close() }
