// Package natsembed runs an embedded nats-server on loopback, optionally with
// a gateway that links it into a super-cluster of regions.
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
// A Server is safe for concurrent use.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures an embedded server. The zero value listens for clients
// on a free port of 127.0.0.1 with no gateway.
type Options struct {
	// Listen is the client listen address, host:port. Port 0 or -1 picks a
	// free port. Empty means 127.0.0.1:-1.
	Listen string
	// ServerName names the server; it must be unique in a super-cluster.
	// Empty: nats-server uses its generated server ID.
	ServerName string
	// Gateway, when set, links this server to other regions' servers.
	Gateway *Gateway
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's notices, warnings and errors (debug with
	// Debug). Nil: the server logs nothing.
	Logger *slog.Logger
	// Debug also forwards the server's debug messages to Logger.
	Debug bool
}

// Gateway configures the server's gateway (one per region).
type Gateway struct {
	// Name is the gateway (region) name; required.
	Name string
	// Listen is the gateway listen address, host:port; port 0 or -1 picks a
	// free port.
	Listen string
	// Gateways are the remote gateways to connect to. Gateways learn of each
	// other, so it is enough for one side to name the other.
	Gateways []RemoteGateway
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

// Errors.
var (
	ErrNotReady = errors.New("natsembed: server not ready for connections in time")
)

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:-1"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	host, port, err := splitAddr(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsembed: listen: %w", err)
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       host,
		Port:       port,
		NoSigs:     true,
		NoLog:      o.Logger == nil,
		// No monitoring, no cluster, no JetStream: core pub/sub only.
		HTTPPort: 0,
	}
	if g := o.Gateway; g != nil {
		if g.Name == "" {
			return nil, errors.New("natsembed: gateway: name required")
		}
		gh, gp, err := splitAddr(g.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsembed: gateway listen: %w", err)
		}
		opts.Gateway = server.GatewayOpts{Name: g.Name, Host: gh, Port: gp}
		for i, r := range g.Gateways {
			rg := &server.RemoteGatewayOpts{Name: r.Name}
			for j, s := range r.URLs {
				u, err := url.Parse(s)
				if err != nil || u.Host == "" {
					return nil, fmt.Errorf("natsembed: gateway: gateways[%d].urls[%d]: bad URL %q", i, j, s)
				}
				rg.URLs = append(rg.URLs, u)
			}
			opts.Gateway.Gateways = append(opts.Gateway.Gateways, rg)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if o.Logger != nil {
		ns.SetLoggerV2(&slogAdapter{l: o.Logger}, o.Debug, false, false)
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
// port"; its 0 means the default port).
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
		h = "127.0.0.1"
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
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
