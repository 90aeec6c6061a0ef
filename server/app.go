// Package server is the geolimit edge daemon: around the engine (package
// server/engine: the pop node core, rules, reload, state file, metrics and,
// through the Replicator hook, replication) it wires the HTTP decision API,
// the reverse proxy and forward auth, the Envoy rate limit service (gRPC),
// the HAProxy agent and the embedded NATS server into one App with a start
// and a graceful shutdown.
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
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/geolimit/geolimit/internal/listen"
	"github.com/geolimit/geolimit/server/api"
	"github.com/geolimit/geolimit/server/engine"
	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/proxy"
	"github.com/geolimit/geolimit/server/rls"
	"github.com/geolimit/geolimit/server/spoa"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"golang.org/x/net/netutil"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/natsembed"
	"github.com/geolimit/geolimit/pop"
)

// The replication hook is the engine's (see package engine).
type (
	// Replicator moves the node's deltas to and from its peers; see
	// engine.Replicator.
	Replicator = engine.Replicator
	// ConfigReloader is a Replicator that applies gossip keys on reload.
	ConfigReloader = engine.ConfigReloader
	// ReplicationEnv is what a Replicator is built from.
	ReplicationEnv = engine.ReplicationEnv
	// NewReplicatorFunc builds a Replicator; see Options.NewReplicator.
	NewReplicatorFunc = engine.NewReplicatorFunc
	// ReplicationStatus is the replication part of GET /v1/status.
	ReplicationStatus = engine.ReplicationStatus
	// Member is one member of the PoP.
	Member = engine.Member
	// RemotePoP is one remote PoP and when it was last heard.
	RemotePoP = engine.RemotePoP
)

// Options configures an App: the engine's options (engine.Options), read
// once by New. The daemon opens the listen section's listeners, so
// IgnoreListen must be false (embed geolimit in a Go program with
// middleware.New instead); CheckReload, when set, runs after the daemon's
// own check of a reload (which refuses to drop the tokens a running
// listener needs).
type Options = engine.Options

// App is a running (or ready to run) edge daemon: an engine.App with the
// listeners of the listen section, the front ends and the embedded NATS
// server. Its methods are safe for concurrent use; Start and Shutdown are
// called once each.
type App struct {
	opts    Options
	cfg     *config.Config // startup config
	log     *slog.Logger
	eng     *engine.App
	started time.Time
	// Of the engine: its clock, node, registry, rule snapshot and API
	// tokens (both swapped by reloads), and its replicator once started.
	clk   clock.Clock
	node  *pop.Node
	reg   *prometheus.Registry
	rules *atomic.Pointer[frontend.Rules]
	auth  *atomic.Pointer[frontend.Tokens] // nil inside: the API takes no token
	repl  Replicator
	met   *metrics

	nats     *natsembed.Server
	natsURL  string
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
	// The status page's ring of recent counts and hot-key listing (ui.go);
	// uiStop stops the ring's sampler.
	activity activityRing
	hot      hotKeysCache
	uiStop   chan struct{}

	loops    sync.WaitGroup // the listeners' serve loops
	shutOnce sync.Once
	shutErr  error
	serveErr chan error
}

// New builds an App: the engine (node core, rules, metrics) and the front
// ends. It opens no socket and starts no goroutine except the coarse clock
// when Options.Clock is nil.
func New(o Options) (*App, error) {
	if o.Config == nil {
		return nil, errors.New("server: options: config required")
	}
	if o.IgnoreListen {
		return nil, errors.New("server: options: IgnoreListen: the daemon opens its listeners; embed geolimit with middleware.New")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &App{
		opts:     o,
		cfg:      o.Config,
		log:      o.Logger,
		serveErr: make(chan error, 5), // one per listener: api, proxy, forward auth, grpc, spoa
	}
	eo := o
	eo.CheckReload = func(cfg *config.Config, tokens *frontend.Tokens) error {
		if err := a.checkReload(cfg, tokens); err != nil {
			return err
		}
		if o.CheckReload != nil {
			return o.CheckReload(cfg, tokens)
		}
		return nil
	}
	eng, err := engine.New(eo)
	if err != nil {
		return nil, err
	}
	env := eng.Env()
	a.eng, a.clk, a.node, a.reg, a.rules, a.auth = eng, eng.Clock(), eng.Node(), eng.Registry(), env.Rules, eng.Tokens()
	a.met = newMetrics(a)
	lim := o.Config.Limits
	a.api = api.New(env, api.Config{MaxBodyBytes: lim.MaxBodyBytes, MaxBatch: lim.MaxBatch,
		LatencyCheck: a.met.latencyCheck, LatencyChecks: a.met.latencyChecks})
	a.fronts = proxy.New(env, proxy.Metrics{LatencyProxy: a.met.latencyProxy, LatencyMiddleware: a.met.latencyMiddleware,
		LatencyForwardAuth: a.met.latencyForwardAuth, UpstreamErrors: a.met.upstreamErrors})
	a.rls = rls.New(env, rls.Config{Tokens: a.auth, MaxBatch: lim.MaxBatch, MaxMsgBytes: lim.MaxBodyBytes,
		ConnectionTimeout: o.Config.HTTP.ReadHeaderTimeout.D(), IdleTimeout: o.Config.HTTP.IdleTimeout.D(),
		Registry: a.reg, Latency: a.met.latencyRLS})
	a.spoa = spoa.New(env, spoa.Config{IdleTimeout: o.Config.HTTP.IdleTimeout.D(),
		FrameTimeout: o.Config.HTTP.ReadHeaderTimeout.D(), Latency: a.met.latencySPOA,
		MaxConnsPerClient: o.Config.HTTP.MaxConnectionsPerClient})
	return a, nil
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

// limitListenShared is limitListen without the per-client refusal, for a
// server that caps its clients' connections itself.
func (a *App) limitListenShared(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(l, a.cfg.HTTP.MaxConnections), nil
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

// checkReload refuses a reload that drops the API tokens while a running
// listener needs them (needTokens); it is the engine's Options.CheckReload.
func (a *App) checkReload(_ *config.Config, tokens *frontend.Tokens) error {
	if tokens != nil {
		return nil
	}
	// Listeners move only at restart: the running ones decide whether the
	// tokens may go, whatever the new file says of listen.*.
	return a.needTokens()
}

// Start starts the embedded NATS server (unless nats.url is set or
// nats.disabled), the listeners of the listen section, the engine (state file, replicator, tick loop, config
// watcher) and the listeners' servers, and returns once all are up. On
// error everything started is stopped.
func (a *App) Start(ctx context.Context) (err error) {
	a.started = time.Now()
	defer func() {
		if err != nil {
			_ = a.Shutdown(context.Background())
		}
	}()
	switch {
	case a.cfg.NATS.Disabled:
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
	if err := a.listen(newSrv); err != nil {
		return err
	}
	n := engine.NATS{URL: a.natsURL}
	if a.nats != nil {
		n.InProcess = a.nats
	}
	// The listeners are open but serve nothing yet: the engine merges the
	// state file before anything is decided.
	if err := a.eng.Start(ctx, n); err != nil {
		return err
	}
	a.repl = a.eng.Replicator()
	if a.apiSrv != nil {
		a.uiStop = make(chan struct{})
		a.loops.Add(1)
		go func() {
			defer a.loops.Done()
			a.sampleActivity(a.uiStop)
		}()
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
	a.ready.Store(true)
	a.log.Info("edge started", "node", a.opts.Self.String(), "api", addrString(a.apiLn), "nats", a.natsURL,
		"proxy", addrString(a.proxyLn), "forward_auth", addrString(a.fwdLn), "grpc", addrString(a.grpcLn), "spoa", addrString(a.spoaLn), "rules", len(a.rules.Load().List))
	return nil
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
		// The agent caps each client's connections itself, a new one
		// taking the place of the client's stalest (spoa.Config): HAProxy
		// shares 127.0.0.1 with every local process.
		if a.spoaLn, err = a.limitListenShared(a.cfg.Listen.SPOA); err != nil {
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
// engine (final flush of the replicator, state file), stops the embedded
// NATS server and the loops. It is idempotent.
func (a *App) Shutdown(ctx context.Context) error {
	a.shutOnce.Do(func() {
		a.ready.Store(false)
		if a.uiStop != nil {
			close(a.uiStop)
		}
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
		if err := a.eng.Close(); err != nil {
			errs = append(errs, err)
		}
		a.loops.Wait()
		if a.nats != nil {
			a.nats.Shutdown()
		}
		a.shutErr = errors.Join(errs...)
		a.log.Info("edge stopped")
	})
	return a.shutErr
}

// Err delivers the error of a listener that stopped serving on its own.
func (a *App) Err() <-chan error { return a.serveErr }

// Ready reports whether the App serves (started and not shutting down) and
// its node is synced: it holds what its former incarnations counted
// (replication.startup_sync, state.file), or stopped waiting for it.
func (a *App) Ready() bool { return a.ready.Load() && a.node.Synced() }

// Reload re-reads the config file and applies what a reload applies
// (engine.App.Reload); an invalid file changes nothing and is returned as
// an error.
func (a *App) Reload() error { return a.eng.Reload() }

// Engine returns the engine the App runs.
func (a *App) Engine() *engine.App { return a.eng }
