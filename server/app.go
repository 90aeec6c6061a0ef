// Package server is the geolimit edge daemon: it wires a clock, the pop node
// core, the HTTP decision API, the reverse proxy, Prometheus metrics, the
// embedded NATS server and (through the Replicator hook) replication into
// one App with a start and a graceful shutdown.
//
//	app, err := server.New(server.Options{Config: cfg, ConfigPath: path, Self: self, Logger: log})
//	if err != nil {
//		return err
//	}
//	return app.Run(ctx) // serves until ctx is done, then drains and flushes
//
// An App is safe for concurrent use: Reload may be called from a signal
// handler while requests are served.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/geolimit/geolimit/internal/listen"
	"github.com/geolimit/geolimit/server/api"
	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/proxy"
	"github.com/geolimit/geolimit/server/rls"
	"github.com/geolimit/geolimit/server/spoa"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"golang.org/x/net/netutil"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/natsembed"
	"github.com/geolimit/geolimit/pop"
)

// Replicator moves the node's deltas to and from its peers (memberlist in the
// PoP, NATS between PoPs). The App starts it after the node, the embedded NATS
// server and the listeners are up, and closes it after the HTTP servers have
// drained, so that Close can send a final flush.
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
	// Clock is the App's clock (Unix nanoseconds).
	Clock clock.Clock
	// Config is the configuration the App started with (gossip, nats,
	// replication sections). Replication settings change only at restart.
	Config *config.Config
	// NATSURL is the NATS client URL: nats.url, or the embedded server's.
	NATSURL string
	// NATS is the embedded server, nil when nats.url is set. The node's own
	// client reaches it in process (NATS.InProcessConn), with the
	// credentials of the nats section.
	NATS *natsembed.Server
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
	crdt.PoPID
	// LastHeardMS is the time since its last message, in milliseconds.
	LastHeardMS int64 `json:"last_heard_ms"`
	Partitioned bool  `json:"partitioned"`
	// Expected: named in replication.expected_pops.
	Expected bool `json:"expected"`
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
	Self crdt.Replica
	// Clock is the clock; nil means a 1ms coarse clock owned by the App.
	Clock clock.Clock
	// Logger is the logger; nil discards logs.
	Logger *slog.Logger
	// Version is reported by geolimit_build_info and /v1/status.
	Version string
	// WatchInterval is how often ConfigPath is polled for changes: 0 means
	// 1s, negative turns polling off.
	WatchInterval time.Duration
	// TickInterval is how often node.Tick runs; 0 means 1s.
	TickInterval time.Duration
	// NewReplicator, when set, builds the replication runtime; nil runs the
	// node without replication (a one-node PoP).
	NewReplicator NewReplicatorFunc
	// Embedded runs the App inside another program's HTTP server, which
	// serves App.Middleware: Start opens none of the App's own listeners
	// (the listen section is ignored: no API, proxy, forward-auth or gRPC
	// listener) but still starts NATS (unless nats.disabled), replication,
	// the tick loop and the config watcher.
	Embedded bool
}

// App is a running (or ready to run) edge daemon. Its methods are safe for
// concurrent use; Start and Shutdown are called once each.
type App struct {
	opts     Options
	cfg      *config.Config // startup config
	log      *slog.Logger
	clk      clock.Clock
	ownClock *clock.Coarse
	node     *pop.Node
	reg      *prometheus.Registry
	met      *metrics
	state    *stateKeeper
	rules    atomic.Pointer[frontend.Rules]
	auth     atomic.Pointer[frontend.Tokens] // nil: the API takes no token
	started  time.Time

	reloadMu   sync.Mutex
	cfgNow     *config.Config // last applied config
	lastHash   [32]byte       // fingerprint of the last content tried (config and secret files)
	metricsMu  sync.Mutex
	ruleMetric map[string]*frontend.RuleMetrics

	nats     *natsembed.Server
	natsURL  string
	repl     Replicator
	apiLn    net.Listener
	proxyLn  net.Listener
	fwdLn    net.Listener
	apiSrv   *http.Server
	proxySrv *http.Server
	fwdSrv   *http.Server
	grpcLn   net.Listener
	grpcSrv  *grpc.Server
	spoaLn   net.Listener
	ready    atomic.Bool
	// connCaps are the open listeners' per-client caps (metrics).
	connCaps atomic.Pointer[[]*listen.PerClientListener]
	// The front ends: the HTTP decision API, proxy mode with forward auth
	// and the middleware, the Envoy rate limit service.
	api    *api.Handler
	fronts *proxy.FrontEnds
	rls    *rls.Service
	spoa   *spoa.Agent

	cancel   context.CancelFunc
	loops    sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
	serveErr chan error
}

// validate validates cfg. Embedded, the App opens none of the listen
// section's listeners, so that section is validated as its defaults: a
// config built in Go may leave it empty.
func validate(cfg *config.Config, embedded bool) error {
	if !embedded {
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
		return nil, errors.New("server: options: config required")
	}
	if err := validate(o.Config, o.Embedded); err != nil {
		return nil, fmt.Errorf("server: config: %w", err)
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
		serveErr:   make(chan error, 5), // one per listener: api, proxy, forward auth, grpc, spoa
	}
	rs, prules, err := frontend.Compile(o.Config, a.metricsFor)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	node, err := pop.New(pop.Config{Self: o.Self, Rules: prules, MaxKeys: o.Config.Limits.MaxKeys, MaxMemory: o.Config.Limits.MemoryBudget(), MaxSkew: o.Config.Limits.MaxSkew.D(),
		IdempotencyTTL: o.Config.Idempotency.TTL.D(), MaxIdempotencyKeys: o.Config.Idempotency.MaxKeysOr(o.Config.Limits)})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	au, err := frontend.TokensOf(o.Config)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	a.node = node
	rs.Bind(node)
	a.rules.Store(rs)
	a.auth.Store(au)
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
	env := frontend.Env{Node: a.node, Clock: a.clk, Rules: &a.rules, Log: a.log}
	lim := o.Config.Limits
	a.api = api.New(env, api.Config{MaxBodyBytes: lim.MaxBodyBytes, MaxBatch: lim.MaxBatch,
		LatencyCheck: a.met.latencyCheck, LatencyChecks: a.met.latencyChecks})
	a.fronts = proxy.New(env, proxy.Metrics{LatencyProxy: a.met.latencyProxy, LatencyMiddleware: a.met.latencyMiddleware,
		LatencyForwardAuth: a.met.latencyForwardAuth, UpstreamErrors: a.met.upstreamErrors})
	a.rls = rls.New(env, rls.Config{Tokens: &a.auth, MaxBatch: lim.MaxBatch, MaxMsgBytes: lim.MaxBodyBytes,
		ConnectionTimeout: o.Config.HTTP.ReadHeaderTimeout.D(), IdleTimeout: o.Config.HTTP.IdleTimeout.D(),
		Registry: a.reg, Latency: a.met.latencyRLS})
	a.spoa = spoa.New(env, spoa.Config{IdleTimeout: o.Config.HTTP.IdleTimeout.D(),
		FrameTimeout: o.Config.HTTP.ReadHeaderTimeout.D(), Latency: a.met.latencySPOA})
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

// APIAddr returns the API listener's address, once started.
func (a *App) APIAddr() net.Addr {
	if a.apiLn == nil {
		return nil
	}
	return a.apiLn.Addr()
}

// ProxyAddr returns the proxy listener's address, or nil when proxy mode is
// off or the App has not started.
func (a *App) ProxyAddr() net.Addr {
	if a.proxyLn == nil {
		return nil
	}
	return a.proxyLn.Addr()
}

// ForwardAuthAddr returns the forward-auth listener's address, or nil when
// listen.forward_auth is not set or the App has not started.
func (a *App) ForwardAuthAddr() net.Addr {
	if a.fwdLn == nil {
		return nil
	}
	return a.fwdLn.Addr()
}

// GRPCAddr returns the gRPC (rate limit service) listener's address, or
// nil when listen.grpc is empty or the App has not started.
func (a *App) GRPCAddr() net.Addr {
	if a.grpcLn == nil {
		return nil
	}
	return a.grpcLn.Addr()
}

// SPOAAddr returns the HAProxy agent's listener address, or nil when
// listen.spoa is empty or the App has not started.
func (a *App) SPOAAddr() net.Addr {
	if a.spoaLn == nil {
		return nil
	}
	return a.spoaLn.Addr()
}

// NATSURL returns the NATS client URL in use, once started.
func (a *App) NATSURL() string { return a.natsURL }

// limitListen opens a TCP listener that holds at most http.max_connections
// connections open at once (golang.org/x/net/netutil), and at most
// http.max_connections_per_client of one client address: idle keep-alive
// connections cannot exhaust the process's file descriptors, and one
// address's stalled connections cannot keep the others out.
func (a *App) limitListen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	pl := listen.PerClient(netutil.LimitListener(l, a.cfg.HTTP.MaxConnections), a.cfg.HTTP.MaxConnectionsPerClient)
	caps := append(slices.Clone(a.connCapsNow()), pl)
	a.connCaps.Store(&caps)
	return pl, nil
}

// connCapsNow returns the per-client caps of the open listeners.
func (a *App) connCapsNow() []*listen.PerClientListener {
	if p := a.connCaps.Load(); p != nil {
		return *p
	}
	return nil
}

// needTokens refuses to run without API tokens while a running listener
// that needs them (listen.api, listen.grpc) listens beyond loopback with no
// insecure flag of the startup config.
func (a *App) needTokens() error {
	if a.auth.Load() == nil {
		return nil // started without tokens: the startup config allowed it
	}
	if a.apiLn != nil && !config.IsLoopback(a.cfg.Listen.API) && !a.cfg.API.Insecure {
		return fmt.Errorf("api.token_file: required while listen.api %s (running) is beyond loopback; listeners change only at restart", a.cfg.Listen.API)
	}
	if a.grpcLn != nil && !config.IsLoopback(a.cfg.Listen.GRPC) && !a.cfg.RLS.Insecure {
		return fmt.Errorf("api.token_file: required while listen.grpc %s (running) is beyond loopback; listeners change only at restart", a.cfg.Listen.GRPC)
	}
	return nil
}

// Start starts the embedded NATS server (unless nats.url is set or
// nats.disabled), the listeners of the listen section (none with
// Options.Embedded), the replicator, the tick loop and the config watcher,
// and returns once all are up. On error everything started is stopped.
func (a *App) Start(ctx context.Context) (err error) {
	a.started = time.Now()
	ctx, a.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			_ = a.Shutdown(context.Background())
		}
	}()
	if err := a.loadState(); err != nil { // before anything is decided
		return err
	}
	switch {
	case a.cfg.NATS.Disabled:
		a.log.Info("nats disabled: no counts cross to other PoPs")
	case a.cfg.NATS.URL != "":
		a.natsURL = a.cfg.NATS.URL
	default:
		// nats.embedded.config_file is read again here: it may have changed
		// since the config was validated, and it is checked again.
		opts := natsembed.FromConfig(a.cfg)
		opts.ServerName = a.opts.Self.Region + "-" + a.opts.Self.PoP + "-" + a.opts.Self.Node
		opts.Logger = a.log.With("component", "nats")
		if a.nats, err = natsembed.Start(opts); err != nil {
			return fmt.Errorf("server: embedded nats: %w", natsembed.ConfigError(err))
		}
		a.natsURL = a.nats.ClientURL()
		a.log.Info("embedded nats-server started", "url", a.natsURL, "gateway", a.nats.GatewayURL())
	}
	h := a.cfg.HTTP
	newSrv := func(handler http.Handler) *http.Server {
		return &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: h.ReadHeaderTimeout.D(),
			ReadTimeout:       h.ReadTimeout.D(),
			WriteTimeout:      h.WriteTimeout.D(),
			IdleTimeout:       h.IdleTimeout.D(),
			MaxHeaderBytes:    h.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
		}
	}
	if !a.opts.Embedded {
		if err := a.listen(newSrv); err != nil {
			return err
		}
	}
	if a.opts.NewReplicator != nil {
		r, err := a.opts.NewReplicator(ReplicationEnv{
			Node: a.node, Clock: a.clk, Config: a.cfg, NATSURL: a.natsURL, NATS: a.nats,
			Logger: a.log.With("component", "replication"), Registry: a.reg,
		})
		if err != nil {
			return fmt.Errorf("server: replication: %w", err)
		}
		if err := r.Start(ctx); err != nil {
			_ = r.Close()
			return fmt.Errorf("server: replication: %w", err)
		}
		a.repl = r
	}
	if a.apiSrv != nil {
		a.serve(a.apiSrv, a.apiLn, "api")
	}
	if a.proxySrv != nil {
		a.serve(a.proxySrv, a.proxyLn, "proxy")
	}
	if a.fwdSrv != nil {
		a.serve(a.fwdSrv, a.fwdLn, "forward_auth")
	}
	if a.grpcSrv != nil {
		a.loops.Add(1)
		go func() {
			defer a.loops.Done()
			if err := a.grpcSrv.Serve(a.grpcLn); err != nil {
				a.log.Error("grpc server failed", "listener", "grpc", "err", err)
				a.serveErr <- fmt.Errorf("server: grpc: %w", err)
			}
		}()
	}
	if a.spoaLn != nil {
		a.loops.Add(1)
		go func() {
			defer a.loops.Done()
			if err := a.spoa.Serve(a.spoaLn); err != nil && !errors.Is(err, spoa.ErrClosed) {
				a.log.Error("spoa agent failed", "listener", "spoa", "err", err)
				a.serveErr <- fmt.Errorf("server: spoa: %w", err)
			}
		}()
	}
	a.every(ctx, a.opts.TickInterval, func() { a.node.Tick(a.clk.Now()) })
	if a.state.path != "" {
		a.every(ctx, a.state.every, func() { _ = a.saveState() }) // failures are logged and counted
	}
	if a.opts.ConfigPath != "" && a.opts.WatchInterval > 0 {
		a.loops.Add(1)
		go a.watchLoop(ctx)
	}
	a.ready.Store(true)
	a.log.Info("edge started", "node", a.opts.Self.String(), "api", addrString(a.apiLn), "in_process", a.opts.Embedded, "nats", a.natsURL,
		"proxy", addrString(a.proxyLn), "forward_auth", addrString(a.fwdLn), "grpc", addrString(a.grpcLn), "spoa", addrString(a.spoaLn), "rules", len(a.rules.Load().List))
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

// listen opens the listeners of the listen section and builds their servers.
func (a *App) listen(newSrv func(http.Handler) *http.Server) (err error) {
	if a.apiLn, err = a.limitListen(a.cfg.Listen.API); err != nil {
		return fmt.Errorf("server: listen.api: %w%s", err, inUseHint(err, "listen.api, or edge -api 127.0.0.1:8081"))
	}
	a.apiSrv = newSrv(a.apiHandler())
	if a.auth.Load() == nil && !config.IsLoopback(a.cfg.Listen.API) {
		a.log.Warn("listen.api listens beyond loopback without a token (api.insecure): whoever reaches it can spend and read counts", "addr", a.cfg.Listen.API)
	}
	if a.cfg.Listen.Proxy != "" {
		ph, err := a.fronts.Proxy(a.cfg.Proxy)
		if err != nil {
			return err
		}
		if a.proxyLn, err = a.limitListen(a.cfg.Listen.Proxy); err != nil {
			return fmt.Errorf("server: listen.proxy: %w%s", err, inUseHint(err, "listen.proxy"))
		}
		a.proxySrv = newSrv(ph)
	}
	if a.cfg.Listen.ForwardAuth != "" {
		if a.fwdLn, err = a.limitListen(a.cfg.Listen.ForwardAuth); err != nil {
			return fmt.Errorf("server: listen.forward_auth: %w%s", err, inUseHint(err, "listen.forward_auth"))
		}
		a.fwdSrv = newSrv(a.fronts.ForwardAuth())
	}
	if a.cfg.Listen.GRPC != "" {
		if a.grpcLn, err = a.limitListen(a.cfg.Listen.GRPC); err != nil {
			return fmt.Errorf("server: listen.grpc: %w%s", err, inUseHint(err, "listen.grpc"))
		}
		a.grpcSrv = a.rls.NewServer()
		if a.auth.Load() == nil && !config.IsLoopback(a.cfg.Listen.GRPC) {
			a.log.Warn("listen.grpc listens beyond loopback without a token (rls.insecure): whoever reaches it can spend counts", "addr", a.cfg.Listen.GRPC)
		}
	}
	if a.cfg.Listen.SPOA != "" {
		if a.spoaLn, err = a.limitListen(a.cfg.Listen.SPOA); err != nil {
			return fmt.Errorf("server: listen.spoa: %w%s", err, inUseHint(err, "listen.spoa"))
		}
		if !config.IsLoopback(a.cfg.Listen.SPOA) {
			a.log.Warn("listen.spoa listens beyond loopback (spoa.insecure): SPOP has no authentication, whoever reaches it can spend counts", "addr", a.cfg.Listen.SPOA)
		}
	}
	return nil
}

// inUseHint is what to do about a listen address another process holds.
func inUseHint(err error, where string) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return " (another process holds it: pick a free address in " + where + ")"
	}
	return ""
}

func addrString(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func (a *App) serve(s *http.Server, l net.Listener, name string) {
	a.loops.Add(1)
	go func() {
		defer a.loops.Done()
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("http server failed", "listener", name, "err", err)
			a.serveErr <- fmt.Errorf("server: %s: %w", name, err)
		}
	}()
}

// Run starts the App, serves until ctx is done (or a listener fails), then
// shuts down gracefully within http.shutdown_timeout.
func (a *App) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-a.serveErr:
	}
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.HTTP.ShutdownTimeout.D())
	defer cancel()
	return errors.Join(runErr, a.Shutdown(sctx))
}

// Shutdown stops accepting requests, drains the HTTP servers, closes the
// replicator (final flush), stops the embedded NATS server and the loops. It
// is idempotent.
func (a *App) Shutdown(ctx context.Context) error {
	a.shutOnce.Do(func() {
		a.ready.Store(false)
		var errs []error
		for _, s := range []*http.Server{a.proxySrv, a.fwdSrv, a.apiSrv} {
			if s == nil {
				continue
			}
			if err := s.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("server: drain: %w", err))
				_ = s.Close()
			}
		}
		if a.grpcSrv != nil {
			if err := a.rls.Drain(ctx, a.grpcSrv); err != nil {
				errs = append(errs, err)
			}
		}
		if a.spoaLn != nil {
			if err := a.spoa.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("server: %w", err))
			}
		}
		for _, l := range []net.Listener{a.apiLn, a.proxyLn, a.fwdLn, a.grpcLn, a.spoaLn} {
			if l != nil {
				_ = l.Close() // a listener that never served
			}
		}
		if a.repl != nil {
			if err := a.repl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("server: replication close: %w", err))
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
				errs = append(errs, fmt.Errorf("server: %w", err))
			}
		}
		if a.nats != nil {
			a.nats.Shutdown()
		}
		if a.ownClock != nil {
			a.ownClock.Stop()
		}
		a.shutErr = errors.Join(errs...)
		a.log.Info("edge stopped")
	})
	return a.shutErr
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

// Err delivers the error of a listener that stopped serving on its own.
func (a *App) Err() <-chan error { return a.serveErr }

// Ready reports whether the App serves (started and not shutting down) and
// its node is synced: it holds what its former incarnations counted
// (replication.startup_sync, state.file), or stopped waiting for it.
func (a *App) Ready() bool { return a.ready.Load() && a.node.Synced() }

// Middleware returns a handler that decides every request against the
// rules exactly as the proxy listener does, and passes the allowed ones to
// next instead of an upstream: the client address from the socket peer or,
// behind proxy.trusted_proxies, from X-Forwarded-For; every applicable rule
// checked (AND), nothing counted when one denies; shadow rules counted but
// never denying. An allowed request reaches next with the RateLimit headers
// of its binding rule already set on w; a denied one is answered 429 with
// Retry-After and a JSON body, and one that sends a header a rule keys on
// more than once is answered 400. Reloaded rules apply to the next request.
//
// Middleware may be called before Start; the counts then wait for Start to
// be replicated (and, without Start, are never forgotten by the tick loop).
//
// Its decisions are timed under the "middleware" label of
// geolimit_decision_seconds.
func (a *App) Middleware(next http.Handler) http.Handler { return a.fronts.Middleware(next) }
