// Package engine is what an edge node runs besides its listeners: the pop
// node core, the compiled rule snapshot, the config reload (SIGHUP and the
// file watcher), the state file, the Prometheus metrics of the core and the
// replication runtime (through the Replicator hook), with a start and a
// close. The edge daemon (package server) adds the listeners, the front
// ends and the embedded NATS server around it; the middleware package runs
// it inside another program's HTTP server. It links neither nats-server
// nor gRPC.
//
//	a, err := engine.New(engine.Options{Config: cfg, Self: self, NewReplicator: edgerepl.New})
//	if err != nil {
//		return err
//	}
//	if err := a.Start(ctx, engine.NATS{URL: cfg.NATS.URL}); err != nil {
//		return err
//	}
//	defer a.Close()
//	h := proxy.New(a.Env(), proxy.Metrics{LatencyMiddleware: a.Latency("middleware")}).Middleware(next)
//
// An App is safe for concurrent use: Reload may be called from a signal
// handler while requests are decided.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
)

// Replicator moves the node's deltas to and from its peers (memberlist in the
// PoP, NATS between PoPs). The App starts it once NATS (and, in the daemon,
// the listeners) are up, and the daemon closes it after its HTTP servers
// have drained, so that Close can send a final flush.
type Replicator interface {
	// Start starts replication and returns once it runs; it must not block
	// for the App's lifetime. ctx is cancelled at shutdown.
	Start(ctx context.Context) error
	// Status reports membership and partitions for GET /v1/status. It must
	// not block and is called concurrently with everything else.
	Status() ReplicationStatus
	// Close stops replication after a final flush. It is called once.
	Close() error
}

// ConfigReloader is implemented by a Replicator that applies part of a
// reloaded config while it runs: the gossip keys of gossip.secret_key_file.
type ConfigReloader interface {
	// ReloadConfig applies cfg's gossip keys (cfg is valid). An error means
	// they were not applied and take effect at restart; the rest of the
	// reload stands.
	ReloadConfig(cfg *config.Config) error
}

// ReplicationEnv is what a Replicator is built from. It is a plain value;
// Node, Clock, NATS and Registry are safe for concurrent use.
type ReplicationEnv struct {
	// Node is the node core whose deltas are replicated.
	Node *pop.Node
	// Clock is the App's own clock (Unix nanoseconds), uncorrected.
	Clock clock.Clock
	// FleetClock is the clock the App's node core decides on: Clock plus
	// the correction the replicator keeps (gossip.Options.FleetClock).
	FleetClock *clock.Offset
	// Config is the configuration the App started with (gossip, nats,
	// replication sections). Replication settings change only at restart.
	Config *config.Config
	// NATSURL is the NATS client URL: nats.url, or the embedded server's.
	NATSURL string
	// NATS is the embedded server, nil when nats.url is set. The node's own
	// client reaches it in process, with the credentials of the nats
	// section.
	NATS nats.InProcessConnProvider
	// Logger is the App's logger.
	Logger *slog.Logger
	// Registry is the App's Prometheus registry, for replication metrics.
	Registry *prometheus.Registry
}

// NewReplicatorFunc builds a Replicator; see Options.NewReplicator.
type NewReplicatorFunc func(ReplicationEnv) (Replicator, error)

// ReplicationStatus is the replication part of GET /v1/status: a plain
// value, not to be mutated once returned from Status.
type ReplicationStatus struct {
	// Members are the PoP's members as memberlist sees them.
	Members []Member `json:"members"`
	// RemotePoPs are the other PoPs heard on NATS.
	RemotePoPs []RemotePoP `json:"remote_pops"`
	// Partitions lists the PoPs ("region/pop") silent for longer than
	// replication.peer_timeout.
	Partitions []string `json:"partitions"`
	// Transports are per-transport replication counters (messages, bytes
	// and entries sent and received, rejected entries, lag); the
	// Replicator chooses their shape.
	Transports any `json:"transports,omitempty"`
	// Epoch is the PoP epoch this node publishes its PoP's totals under
	// (0 while it is not known yet).
	Epoch uint64 `json:"epoch"`
	// RegionVoices: region voices are on (replication.region_voices, or
	// chosen by the fleet's shape when it is not set); RegionVoicesChosen
	// says how ("set" or "fleet of N PoPs in M regions").
	RegionVoices       bool   `json:"region_voices"`
	RegionVoicesChosen string `json:"region_voices_chosen,omitempty"`
	// RegionVoice: this node's PoP speaks for its region
	// (replication.region_voices); RegionEpoch is the region epoch its
	// region's totals go under (0 while it is not known yet, or with region
	// voices off).
	RegionVoice bool   `json:"region_voice"`
	RegionEpoch uint64 `json:"region_epoch"`
	// Startup is where the startup sync stands (replication.startup_sync);
	// the Replicator chooses its shape.
	Startup any `json:"startup_sync,omitempty"`
	// Drift lists, per remote PoP, its estimated clock offset and the
	// global rules it has otherwise (a different window, limit, scope or
	// partition policy) or this node lacks; the Replicator chooses its
	// shape.
	Drift any `json:"drift,omitempty"`
	// Protocol are the replication protocol's counters (flushes, forwards,
	// heartbeats, sync requests and answers, relays); the Replicator
	// chooses their shape.
	Protocol any `json:"protocol,omitempty"`
}

// Member is one member of the PoP.
type Member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr,omitempty"`
	State string `json:"state"`
}

// RemotePoP is one remote PoP and when it was last heard.
type RemotePoP struct {
	identity.PoPID
	// LastHeardMS is the time since its last message, in milliseconds.
	LastHeardMS int64 `json:"last_heard_ms"`
	Partitioned bool  `json:"partitioned"`
	// Expected: named in replication.expected_pops.
	Expected bool `json:"expected"`
	// Epoch is the latest epoch of its PoP totals seen (absent: none yet).
	Epoch uint64 `json:"epoch,omitempty"`
}

// Options configures an App. It is a plain value, read once by New.
type Options struct {
	// Config is the configuration; it must be valid (config.Parse/Load
	// validate). Required.
	Config *config.Config
	// ConfigPath is the file Reload reads and the watcher polls; empty
	// disables both.
	ConfigPath string
	// Self is the node's replica identity, with an incarnation that is new
	// at every start. Required.
	Self identity.Replica
	// Clock is the clock; nil means a 1ms coarse clock owned by the App.
	Clock clock.Clock
	// Logger is the logger; nil discards logs.
	Logger *slog.Logger
	// Version is reported by geolimit_build_info (and the daemon's
	// GET /v1/status).
	Version string
	// WatchInterval is how often ConfigPath is polled for changes: 0 means
	// 1s, negative turns polling off.
	WatchInterval time.Duration
	// TickInterval is how often node.Tick runs; 0 means 1s.
	TickInterval time.Duration
	// NewReplicator, when set, builds the replication runtime; nil runs the
	// node without replication (a one-node PoP).
	NewReplicator NewReplicatorFunc
	// IgnoreListen says the program opens none of the listen section's
	// listeners: New validates that section as its defaults, so that a
	// config built in Go may leave it empty.
	IgnoreListen bool
	// CheckReload, when set, is called with a reloaded config (valid) and
	// its API tokens (nil for none) before anything of it applies; an error
	// refuses the reload. The daemon refuses to drop the tokens that a
	// running listener needs.
	CheckReload func(cfg *config.Config, tokens *frontend.Tokens) error
}

// NATS is what Start links replication to.
type NATS struct {
	// URL is the NATS client URL (nats.url, or the embedded server's);
	// empty with nats.disabled.
	URL string
	// InProcess is the embedded server of this process, nil for none.
	InProcess nats.InProcessConnProvider
}

// App is the node core of a daemon or an embedding program with its rules,
// reload, state file, metrics and replication. Its methods are safe for
// concurrent use; Start and Close are called once each.
type App struct {
	opts     Options
	cfg      *config.Config // startup config
	log      *slog.Logger
	clk      clock.Clock
	ownClock *clock.Coarse
	fleet    *clock.Offset // a.clk: the fleet clock over the App's own
	node     *pop.Node
	reg      *prometheus.Registry
	met      *metrics
	state    *stateKeeper
	rules    atomic.Pointer[frontend.Rules]
	auth     atomic.Pointer[frontend.Tokens] // nil: the API takes no token
	// shed is the node's load shedder (shedding), its classes applied on
	// reload.
	shed frontend.Shedder

	reloadMu   sync.Mutex
	cfgNow     *config.Config // last applied config
	lastHash   [32]byte       // fingerprint of the last content tried (config and secret files)
	metricsMu  sync.Mutex
	ruleMetric map[string]*frontend.RuleMetrics

	repl      Replicator
	cancel    context.CancelFunc
	loops     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// validate validates cfg; with ignoreListen, the listen section as its
// defaults.
func validate(cfg *config.Config, ignoreListen bool) error {
	if !ignoreListen {
		return cfg.Validate()
	}
	c := *cfg
	c.Listen = config.DefaultConfig().Listen
	return c.Validate()
}

// New builds an App: the node core, rules and metrics. It opens no socket
// and starts no goroutine except the coarse clock when Options.Clock is nil.
func New(o Options) (*App, error) {
	if o.Config == nil {
		return nil, errors.New("engine: options: config required")
	}
	if err := validate(o.Config, o.IgnoreListen); err != nil {
		return nil, fmt.Errorf("engine: config: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WatchInterval == 0 {
		o.WatchInterval = time.Second
	}
	if o.TickInterval <= 0 {
		o.TickInterval = time.Second
	}
	a := &App{
		opts:       o,
		cfg:        o.Config,
		cfgNow:     o.Config,
		log:        o.Logger,
		clk:        o.Clock,
		reg:        prometheus.NewRegistry(),
		ruleMetric: map[string]*frontend.RuleMetrics{},
	}
	rs, prules, err := frontend.Compile(o.Config, a.metricsFor)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	auth, err := o.Config.ModeAuthority.Load()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	node, err := pop.New(pop.Config{Self: o.Self, Rules: prules, MaxKeys: o.Config.Limits.MaxKeys, MaxMemory: o.Config.Limits.MemoryBudget(), MaxSkew: o.Config.Limits.MaxSkew.D(),
		IdempotencyTTL: o.Config.Idempotency.TTL.D(), MaxIdempotencyKeys: o.Config.Idempotency.MaxKeysOr(o.Config.Limits), ModeAuthority: auth})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	au, err := frontend.TokensOf(o.Config)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	a.node = node
	rs.Bind(node)
	a.rules.Store(rs)
	a.auth.Store(au)
	a.shed.Apply(o.Config.Shedding)
	if o.ConfigPath != "" {
		if b, err := os.ReadFile(o.ConfigPath); err == nil {
			a.lastHash = fingerprint(b, o.Config)
		}
	}
	a.met = newMetrics(a)
	a.state = newStateKeeper(a)
	if a.clk == nil {
		a.ownClock = clock.NewCoarse(time.Millisecond)
		a.clk = a.ownClock
	}
	// The node core decides on the fleet clock: the App's clock plus the
	// correction its replicator agrees with the other PoPs.
	a.fleet = clock.NewOffset(a.clk)
	a.clk = a.fleet
	return a, nil
}

func (a *App) metricsFor(name string) *frontend.RuleMetrics {
	a.metricsMu.Lock()
	defer a.metricsMu.Unlock()
	m := a.ruleMetric[name]
	if m == nil {
		m = &frontend.RuleMetrics{}
		a.ruleMetric[name] = m
	}
	return m
}

// Node returns the node core.
func (a *App) Node() *pop.Node { return a.node }

// Registry returns the App's Prometheus registry.
func (a *App) Registry() *prometheus.Registry { return a.reg }

// Clock returns the App's clock.
func (a *App) Clock() clock.Clock { return a.clk }

// Env is what the front ends decide with: the node, the clock, the rule
// snapshot (swapped by reloads), the logger and the node's load shedder.
func (a *App) Env() frontend.Env {
	return frontend.Env{Node: a.node, Clock: a.clk, Rules: &a.rules, Log: a.log, Shed: &a.shed}
}

// Shedder returns the node's load shedder (shedding): one count of the
// requests in flight for every front end built on Env.
func (a *App) Shedder() *frontend.Shedder { return &a.shed }

// Tokens are the API's bearer tokens of the config applied last (nil
// inside: the API takes no token), swapped by reloads.
func (a *App) Tokens() *atomic.Pointer[frontend.Tokens] { return &a.auth }

// Replicator returns the running replicator, nil before Start or without
// Options.NewReplicator.
func (a *App) Replicator() Replicator { return a.repl }

// Start merges the state file into the node, starts the replicator (linked
// to n), the tick loop that forgets expired counts, the state file's
// writes and the config watcher, and returns once all run. On error
// everything started is stopped, as by Close.
func (a *App) Start(ctx context.Context, n NATS) (err error) {
	ctx, a.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			_ = a.Close()
		}
	}()
	if err := a.loadState(); err != nil { // before anything is decided
		return err
	}
	if a.cfg.NATS.Disabled {
		a.log.Info("nats disabled: no counts cross to other PoPs")
	}
	if a.opts.NewReplicator != nil {
		r, err := a.opts.NewReplicator(ReplicationEnv{
			Node: a.node, Clock: a.fleet.Base(), FleetClock: a.fleet, Config: a.cfg, NATSURL: n.URL, NATS: n.InProcess,
			Logger: a.log.With("component", "replication"), Registry: a.reg,
		})
		if err != nil {
			return fmt.Errorf("engine: replication: %w", err)
		}
		if err := r.Start(ctx); err != nil {
			_ = r.Close()
			return fmt.Errorf("engine: replication: %w", err)
		}
		a.repl = r
	}
	a.every(ctx, a.opts.TickInterval, func() { a.node.Tick(a.clk.Now()) })
	if a.state.path != "" {
		a.every(ctx, a.state.every, func() { _ = a.saveState() }) // failures are logged and counted
		a.loops.Add(1)
		go a.saveOnModeChange(ctx) // modes.go
	}
	if a.opts.ConfigPath != "" && a.opts.WatchInterval > 0 {
		a.loops.Add(1)
		go a.watchLoop(ctx)
	}
	a.warn(a.cfg)
	return nil
}

// warn logs what in cfg works, but not as its author may expect
// (config.Config.Warnings).
func (a *App) warn(cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		a.log.Warn("config: " + w)
	}
}

// Close closes the replicator (final flush), stops the loops, writes the
// state file (when Start ran) and stops the App's own clock. It is
// idempotent; the daemon calls it once its listeners have drained.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		var errs []error
		if a.repl != nil {
			if err := a.repl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("engine: replication close: %w", err))
			}
		}
		if a.cancel != nil {
			a.cancel()
		}
		a.loops.Wait()
		if a.cancel != nil {
			// The last counts, after the final flush: the next start goes
			// on from here.
			if err := a.saveState(); err != nil {
				errs = append(errs, fmt.Errorf("engine: %w", err))
			}
		}
		if a.ownClock != nil {
			a.ownClock.Stop()
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

// every runs fn every d until ctx is done, in a goroutine of a.loops.
func (a *App) every(ctx context.Context, d time.Duration, fn func()) {
	a.loops.Add(1)
	go func() {
		defer a.loops.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
}
