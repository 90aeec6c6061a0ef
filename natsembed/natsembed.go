// Package natsembed runs an embedded nats-server, optionally with a gateway
// that links it into a super-cluster of regions, and optionally configured
// by a native nats-server configuration file (accounts, users, nkeys,
// permissions, TLS on every port, gateway authorization).
//
//	s, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1"})
//	if err != nil {
//		return err
//	}
//	defer s.Shutdown()
//	nc, _ := nats.Connect(s.ClientURL())
//
// Two regions, both on free ports (gateways discover each other both ways, so
// only the second needs the first's URL):
//
//	eu, _ := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1",
//		Gateway: &natsembed.Gateway{Name: "eu", Listen: "127.0.0.1:-1"}})
//	us, _ := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1",
//		Gateway: &natsembed.Gateway{Name: "us", Listen: "127.0.0.1:-1",
//			Gateways: []natsembed.RemoteGateway{{Name: "eu", URLs: []string{eu.GatewayURL()}}}}})
//
// With a configuration file, the Options fill only what the file leaves out,
// and setting the same thing in both is an error (*ConflictError):
//
//	s, err := natsembed.Start(natsembed.Options{ConfigFile: "/etc/geolimit/nats-eu.conf",
//		DefaultListen: "127.0.0.1:4222", DefaultGatewayName: "eu"})
//
// A listener beyond loopback must be protected: the client port (and the
// websocket and MQTT ports) by client authentication unless Options.Insecure,
// the gateway by gateway authorization and TLS unless Gateway.Insecure, and
// the cluster and leafnode ports, which only the file can open, by their
// own authorization and TLS (*ExposureError).
//
// A Server is safe for concurrent use.
package natsembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/geolimit/geolimit/internal/listen"
)

// Options configures an embedded server. The zero value listens for clients
// on a free port of 127.0.0.1 with no gateway.
type Options struct {
	// ConfigFile is a nats-server configuration file in nats-server's own
	// format, read by nats-server's parser (server.ProcessConfigFile). The
	// settings below fill only what it leaves out; Listen, Gateway.Name,
	// Gateway.Listen or Gateway.Gateways set in both is a *ConflictError.
	// Empty: no file.
	ConfigFile string
	// Listen is the client listen address, host:port. Port 0 or -1 picks a
	// free port; an empty host listens on every interface. Empty: the
	// file's client address, else DefaultListen.
	Listen string
	// DefaultListen is the client listen address when neither Listen nor
	// the file set one. Empty means 127.0.0.1:-1.
	DefaultListen string
	// Insecure allows the client port (and a websocket or MQTT port opened
	// by the file) to listen beyond loopback without client authentication.
	Insecure bool
	// ServerName names the server unless the file does; it must be unique
	// in a super-cluster. Empty: nats-server uses its generated server ID.
	ServerName string
	// Gateway, when set, links this server to other regions' servers. The
	// file's gateway block may set it instead, or in part.
	Gateway *Gateway
	// DefaultGatewayName names the gateway when neither Gateway.Name nor the
	// file do.
	DefaultGatewayName string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's notices, warnings and errors (debug with
	// Debug), and the warnings of Resolve. Nil: the server logs nothing.
	Logger *slog.Logger
	// Debug also forwards the server's debug messages to Logger.
	Debug bool
}

// Gateway configures the server's gateway (one per region).
type Gateway struct {
	// Name is the gateway (region) name. Empty: the file's, else
	// Options.DefaultGatewayName; one of them is required.
	Name string
	// Listen is the gateway listen address, host:port; port 0 or -1 picks a
	// free port. Empty: the file's; one of them is required.
	Listen string
	// Gateways are the remote gateways to connect to. Gateways learn of each
	// other, so it is enough for one side to name the other.
	Gateways []RemoteGateway
	// Insecure allows the gateway to listen beyond loopback without gateway
	// authorization or without TLS.
	Insecure bool
}

// RemoteGateway is a remote region's gateway.
type RemoteGateway struct {
	// Name is the remote gateway's name.
	Name string
	// URLs are its gateway URLs, e.g. nats://127.0.0.1:7222.
	URLs []string
}

// Server is a running embedded nats-server.
type Server struct {
	ns   *server.Server
	once sync.Once
}

// ErrNotReady is returned when the server does not accept connections in
// time.
var ErrNotReady = errors.New("natsembed: server not ready for connections in time")

// PortError is a listen address of the server that cannot be bound (most
// often: another process, a nats-server or another geolimit, holds it).
// Start returns it at once rather than waiting for a server that never
// becomes ready.
type PortError struct {
	// What is "client" or "gateway"; Addr the host:port.
	What, Addr string
	Err        error
}

func (e *PortError) Error() string {
	return "natsembed: " + e.What + " listen " + e.Addr + ": " + e.Err.Error()
}

func (e *PortError) Unwrap() error { return e.Err }

// checkPort binds host:port and lets it go at once: whether the server
// will be able to.
func checkPort(what, host string, port int) error {
	if port <= 0 {
		return nil // a random port
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return &PortError{What: what, Addr: addr, Err: err}
	}
	return l.Close()
}

// Names of the Options settings in errors.
const (
	OptListen          = "Listen"
	OptGatewayName     = "Gateway.Name"
	OptGatewayListen   = "Gateway.Listen"
	OptGatewayGateways = "Gateway.Gateways"
)

// ConfigFileError is a configuration file that cannot be read or parsed, or
// that sets something the embedded server does not support.
type ConfigFileError struct {
	// File is Options.ConfigFile.
	File string
	// Key is the file's setting at fault, e.g. "log_file"; empty for an
	// error of nats-server's parser (which names file, line and key).
	Key string
	Err error
}

func (e *ConfigFileError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %v", e.File, e.Key, e.Err)
	}
	// nats-server's messages start with the file name already, one line
	// per error.
	msg := strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(e.Err.Error()), "\n", "; ")), " ")
	if strings.HasPrefix(msg, e.File) {
		return msg
	}
	return e.File + ": " + msg
}

func (e *ConfigFileError) Unwrap() error { return e.Err }

// ConflictError is a setting made both by Options and by the configuration
// file.
type ConflictError struct {
	// Option is the Options setting (OptListen, OptGatewayName, ...).
	Option string
	// FileKey is the file's setting, e.g. "listen" or "gateway.name".
	FileKey string
	// File is Options.ConfigFile.
	File string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("natsembed: %s and %s of %s both set; keep one", e.Option, e.FileKey, e.File)
}

// MissingError is a required setting made neither by Options nor by the
// configuration file.
type MissingError struct {
	// Option is the Options setting (OptGatewayName, OptGatewayListen).
	Option string
	// FileKey is the file's equivalent, e.g. "gateway.listen".
	FileKey string
	// File is Options.ConfigFile, empty without one.
	File string
}

func (e *MissingError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("natsembed: %s: required", e.Option)
	}
	return fmt.Sprintf("natsembed: %s: required, here or as %s in %s", e.Option, e.FileKey, e.File)
}

// Listener names in an ExposureError.
const (
	ListenerClient    = "client"
	ListenerWebsocket = "websocket"
	ListenerMQTT      = "mqtt"
	ListenerGateway   = "gateway"
	ListenerCluster   = "cluster"
	ListenerLeafnodes = "leafnodes"
)

// ExposureError is a listener beyond loopback without the protection it
// needs: client authentication for the client, websocket and MQTT ports;
// authorization and TLS for the gateway, cluster and leafnode ports.
type ExposureError struct {
	// Listener is one of the Listener constants.
	Listener string
	// Addr is the listen address, host:port.
	Addr string
	// FromFile tells whether the address comes from the configuration file.
	FromFile bool
	// NoAuth: no authentication (client ports) or authorization (links).
	NoAuth bool
	// NoTLS: no TLS (links only).
	NoTLS bool
}

// Missing names what is missing, e.g. "authorization and TLS".
func (e *ExposureError) Missing() string {
	auth := "authorization"
	if e.clientPort() {
		auth = "client authentication"
	}
	switch {
	case e.NoAuth && e.NoTLS:
		return auth + " and TLS"
	case e.NoAuth:
		return auth
	default:
		return "TLS"
	}
}

func (e *ExposureError) clientPort() bool {
	return e.Listener == ListenerClient || e.Listener == ListenerWebsocket || e.Listener == ListenerMQTT
}

func (e *ExposureError) Error() string {
	return fmt.Sprintf("natsembed: %s listen address %s is beyond loopback without %s", e.Listener, e.Addr, e.Missing())
}

// Resolve reads the configuration file, merges it with o and checks the
// result as Start does, without starting anything. It returns the options
// the server would run with, and warnings worth logging (a client port
// beyond loopback without TLS, monitoring beyond loopback).
func Resolve(o Options) (*server.Options, []string, error) {
	opts := &server.Options{}
	file := o.ConfigFile
	if file != "" {
		fo, err := server.ProcessConfigFile(file)
		if err != nil {
			return nil, nil, &ConfigFileError{File: file, Err: err}
		}
		opts = fo
		// The embedded server logs through Logger; a log file or syslog of
		// its own would go unnoticed next to the daemon's log.
		for _, k := range []struct {
			key string
			set bool
		}{{"log_file", opts.LogFile != ""}, {"syslog", opts.Syslog}, {"remote_syslog", opts.RemoteSyslog != ""}} {
			if k.set {
				return nil, nil, &ConfigFileError{File: file, Key: k.key, Err: errors.New("not supported: the embedded server logs through geolimit's log")}
			}
		}
	}
	opts.NoSigs = true
	opts.NoLog = o.Logger == nil
	if opts.ServerName == "" {
		opts.ServerName = o.ServerName
	}

	// Client port.
	clientFromFile := opts.Host != "" || opts.Port != 0
	switch {
	case o.Listen != "" && clientFromFile:
		return nil, nil, &ConflictError{Option: OptListen, FileKey: "listen", File: file}
	case o.Listen != "":
		h, p, err := splitAddr(o.Listen)
		if err != nil {
			return nil, nil, fmt.Errorf("natsembed: %s: %w", OptListen, err)
		}
		opts.Host, opts.Port = h, p
	case !clientFromFile:
		def := o.DefaultListen
		if def == "" {
			def = "127.0.0.1:-1"
		}
		h, p, err := splitAddr(def)
		if err != nil {
			return nil, nil, fmt.Errorf("natsembed: DefaultListen: %w", err)
		}
		opts.Host, opts.Port = h, p
	default: // the file's, with nats-server's defaults for what it omits
		if opts.Host == "" {
			opts.Host = server.DEFAULT_HOST
		}
		if opts.Port == 0 {
			opts.Port = server.DEFAULT_PORT
		}
	}

	// Gateway.
	fg := &opts.Gateway
	gwFromFile := fg.Host != "" || fg.Port != 0
	if g := o.Gateway; g != nil {
		if g.Name != "" {
			if fg.Name != "" {
				return nil, nil, &ConflictError{Option: OptGatewayName, FileKey: "gateway.name", File: file}
			}
			fg.Name = g.Name
		}
		if g.Listen != "" {
			if gwFromFile {
				return nil, nil, &ConflictError{Option: OptGatewayListen, FileKey: "gateway.listen", File: file}
			}
			h, p, err := splitAddr(g.Listen)
			if err != nil {
				return nil, nil, fmt.Errorf("natsembed: %s: %w", OptGatewayListen, err)
			}
			fg.Host, fg.Port = h, p
		}
		if len(g.Gateways) > 0 {
			if len(fg.Gateways) > 0 {
				return nil, nil, &ConflictError{Option: OptGatewayGateways, FileKey: "gateway.gateways", File: file}
			}
			for i, r := range g.Gateways {
				rg := &server.RemoteGatewayOpts{Name: r.Name}
				for j, s := range r.URLs {
					u, err := url.Parse(s)
					if err != nil || u.Host == "" {
						return nil, nil, fmt.Errorf("natsembed: %s[%d].URLs[%d]: bad URL %q", OptGatewayGateways, i, j, s)
					}
					rg.URLs = append(rg.URLs, u)
				}
				fg.Gateways = append(fg.Gateways, rg)
			}
		}
	}
	gateway := o.Gateway != nil || fg.Name != "" || fg.Host != "" || fg.Port != 0 || len(fg.Gateways) > 0 ||
		fg.Username != "" || fg.TLSConfig != nil
	if gateway {
		if fg.Name == "" {
			fg.Name = o.DefaultGatewayName
		}
		if fg.Name == "" {
			return nil, nil, &MissingError{Option: OptGatewayName, FileKey: "gateway.name", File: file}
		}
		if fg.Port == 0 {
			// nats-server leaves a gateway without a port off; say so.
			return nil, nil, &MissingError{Option: OptGatewayListen, FileKey: "gateway.listen", File: file}
		}
		if fg.Host == "" {
			fg.Host = server.DEFAULT_HOST
		}
	}

	warnings, err := checkExposure(opts, o, clientFromFile, gateway && (o.Gateway == nil || o.Gateway.Listen == ""))
	if err != nil {
		return nil, nil, err
	}
	return opts, warnings, nil
}

// checkExposure refuses listeners beyond loopback without the protection
// they need and returns warnings for those that are allowed but weak.
func checkExposure(opts *server.Options, o Options, clientFromFile, gatewayFromFile bool) ([]string, error) {
	var warnings []string
	addr := func(h string, p int) string { return net.JoinHostPort(h, strconv.Itoa(p)) }
	clientAuth := ClientAuth(opts)

	if !IsLoopback(opts.Host) {
		if !clientAuth && !o.Insecure {
			return nil, &ExposureError{Listener: ListenerClient, Addr: addr(opts.Host, opts.Port), FromFile: clientFromFile, NoAuth: true}
		}
		if opts.TLSConfig == nil {
			warnings = append(warnings, fmt.Sprintf("the client port %s is beyond loopback without TLS: client passwords and replicated counts (client IPs among them) travel in clear", addr(opts.Host, opts.Port)))
		}
	}
	// Websocket, MQTT and leafnode connections do not go through the client
	// port's TLS: a verified client certificate there protects none of
	// them. They count as authenticated only with users (or a token,
	// nkeys, operators) that every listener checks, or credentials of their
	// own.
	usersAuth := AuthRequired(opts)
	ws := &opts.Websocket
	if ws.Port != 0 && !IsLoopback(defaultHost(ws.Host)) && !o.Insecure {
		own := ws.Username != "" || ws.Token != ""
		if ws.NoAuthUser != "" || !(own || usersAuth) {
			return nil, &ExposureError{Listener: ListenerWebsocket, Addr: addr(defaultHost(ws.Host), ws.Port), FromFile: true, NoAuth: true}
		}
	}
	mq := &opts.MQTT
	if mq.Port != 0 && !IsLoopback(defaultHost(mq.Host)) && !o.Insecure {
		own := mq.Username != "" || mq.Token != ""
		if mq.NoAuthUser != "" || !(own || usersAuth) {
			return nil, &ExposureError{Listener: ListenerMQTT, Addr: addr(defaultHost(mq.Host), mq.Port), FromFile: true, NoAuth: true}
		}
	}

	g := &opts.Gateway
	if g.Port != 0 && !IsLoopback(g.Host) && (o.Gateway == nil || !o.Gateway.Insecure) {
		e := &ExposureError{Listener: ListenerGateway, Addr: addr(g.Host, g.Port), FromFile: gatewayFromFile,
			NoAuth: g.Username == "" && !g.TLSMap && !g.TLSCheckKnownURLs, NoTLS: g.TLSConfig == nil}
		if e.NoAuth || e.NoTLS {
			return nil, e
		}
	}
	c := &opts.Cluster
	if c.Port != 0 && !IsLoopback(defaultHost(c.Host)) {
		e := &ExposureError{Listener: ListenerCluster, Addr: addr(defaultHost(c.Host), c.Port), FromFile: true,
			NoAuth: c.Username == "" && !c.TLSMap && !c.TLSCheckKnownURLs, NoTLS: c.TLSConfig == nil}
		if e.NoAuth || e.NoTLS {
			return nil, e
		}
	}
	l := &opts.LeafNode
	if l.Port != 0 && !IsLoopback(defaultHost(l.Host)) {
		e := &ExposureError{Listener: ListenerLeafnodes, Addr: addr(defaultHost(l.Host), l.Port), FromFile: true,
			NoAuth: l.Username == "" && l.Nkey == "" && len(l.Users) == 0 && !l.TLSMap && !usersAuth, NoTLS: l.TLSConfig == nil}
		if e.NoAuth || e.NoTLS {
			return nil, e
		}
	}
	for _, m := range []struct {
		port int
		name string
	}{{opts.HTTPPort, "http"}, {opts.HTTPSPort, "https"}} {
		h := opts.HTTPHost
		if h == "" {
			h = opts.Host
		}
		if m.port != 0 && !IsLoopback(h) {
			warnings = append(warnings, fmt.Sprintf("the monitoring port (%s) %s is beyond loopback: it shows connections, subscriptions and accounts to anyone who can reach it", m.name, addr(h, m.port)))
		}
	}
	return warnings, nil
}

func defaultHost(h string) string {
	if h == "" {
		return server.DEFAULT_HOST
	}
	return h
}

// ClientAuth reports whether opts make clients authenticate: users,
// nkeys, a token, operator JWTs, an auth callout, or TLS client
// certificates. A no_auth_user lets clients in without credentials, so it
// counts as none.
func ClientAuth(opts *server.Options) bool {
	if opts.NoAuthUser != "" {
		return false
	}
	verify := opts.TLSConfig != nil && (opts.TLSVerify || opts.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert)
	return AuthRequired(opts) || (verify && !opts.AllowNonTLS)
}

// IsLoopback reports whether a listen host stays on the machine (see
// listen.IsLoopbackHost: literal loopback addresses only).
func IsLoopback(host string) bool { return listen.IsLoopbackHost(host) }

// Start starts a server and waits until it accepts connections. Errors of
// the configuration are those of Resolve.
func Start(o Options) (*Server, error) {
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	opts, warnings, err := Resolve(o)
	if err != nil {
		return nil, err
	}
	if err := checkPort("client", opts.Host, opts.Port); err != nil {
		return nil, err
	}
	if opts.Gateway.Name != "" {
		if err := checkPort("gateway", opts.Gateway.Host, opts.Gateway.Port); err != nil {
			return nil, err
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if o.Logger != nil {
		ns.SetLoggerV2(&slogAdapter{l: o.Logger}, o.Debug || opts.Debug, opts.Trace, false)
		for _, w := range warnings {
			o.Logger.Warn("embedded nats-server: " + w)
		}
	}
	go ns.Start()
	if !ns.ReadyForConnections(o.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, ErrNotReady
	}
	return &Server{ns: ns}, nil
}

// splitAddr splits host:port, mapping port 0 to -1 (nats-server's "random
// port"; its 0 means the default port). An empty host is every interface.
func splitAddr(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if port == 0 {
		port = -1
	}
	if h == "" {
		h = server.DEFAULT_HOST
	}
	return h, port, nil
}

// ClientURL returns the URL clients connect to, e.g. nats://127.0.0.1:4222.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr returns the actual client listen address.
func (s *Server) Addr() net.Addr { return s.ns.Addr() }

// GatewayAddr returns the gateway's actual listen address, or nil without a
// gateway.
func (s *Server) GatewayAddr() *net.TCPAddr { return s.ns.GatewayAddr() }

// GatewayURL returns the gateway's URL (nats://host:port) for other regions'
// RemoteGateway.URLs, or "" without a gateway.
func (s *Server) GatewayURL() string {
	a := s.ns.GatewayAddr()
	if a == nil {
		return ""
	}
	return "nats://" + a.String()
}

// NumOutboundGateways returns how many remote gateways this server has an
// outbound connection to: tests wait for it before expecting messages to
// cross regions.
func (s *Server) NumOutboundGateways() int { return s.ns.NumOutboundGateways() }

// InProcessConn returns a connection to the server that never touches the
// network (nats.InProcessServer): the client port's TLS is not required on
// it, its authentication is.
func (s *Server) InProcessConn() (net.Conn, error) { return s.ns.InProcessConn() }

// NATS returns the underlying nats-server, for what this package does not
// wrap.
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits for it. It is idempotent.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	})
}

// slogAdapter routes nats-server logs to slog; notices are debug messages.
// Warnings and errors that repeat (a gateway or route that cannot connect is
// retried every second) are logged with an exponential backoff per message
// format: the first at once, then at most once per 1s, 2s, 4s ... 5m, with
// the number left out meanwhile.
type slogAdapter struct {
	l   *slog.Logger
	now func() time.Time // time.Now when nil

	mu   sync.Mutex
	seen map[string]*repeat
}

// repeat is the backoff state of one message format.
type repeat struct {
	last, next time.Time
	wait       time.Duration
	skipped    int
}

// Bounds of the backoff, and how long a format must stay quiet before it is
// logged at once again.
const (
	repeatFirst = time.Second
	repeatMax   = 5 * time.Minute
	repeatReset = 10 * time.Minute
	maxFormats  = 1024
)

func (a *slogAdapter) Noticef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Warnf(f string, v ...any)   { a.throttled(slog.LevelWarn, f, v) }
func (a *slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Errorf(f string, v ...any)  { a.throttled(slog.LevelError, f, v) }
func (a *slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }

func (a *slogAdapter) throttled(level slog.Level, f string, v []any) {
	now := time.Now()
	if a.now != nil {
		now = a.now()
	}
	a.mu.Lock()
	if a.seen == nil || len(a.seen) >= maxFormats {
		a.seen = map[string]*repeat{}
	}
	r := a.seen[f]
	switch {
	case r == nil || now.Sub(r.last) >= repeatReset:
		r = &repeat{wait: repeatFirst}
		a.seen[f] = r
	case now.Before(r.next):
		r.skipped++
		r.last = now
		a.mu.Unlock()
		return
	default:
		r.wait = min(2*r.wait, repeatMax)
	}
	skipped, wait := r.skipped, r.wait
	r.last, r.next, r.skipped = now, now.Add(wait), 0
	a.mu.Unlock()
	msg := fmt.Sprintf(f, v...)
	if skipped > 0 {
		a.l.Log(context.Background(), level, msg, "repeated", skipped, "next_in", wait)
		return
	}
	a.l.Log(context.Background(), level, msg)
}

// AuthRequired reports whether opts make clients present credentials when
// they connect (users, nkeys, a token, operator JWTs, an auth callout) and
// no no_auth_user lets them in without.
func AuthRequired(opts *server.Options) bool {
	if opts.NoAuthUser != "" {
		return false
	}
	return opts.Username != "" || opts.Authorization != "" || len(opts.Users) > 0 || len(opts.Nkeys) > 0 ||
		len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0 || opts.AuthCallout != nil ||
		opts.CustomClientAuthentication != nil
}
