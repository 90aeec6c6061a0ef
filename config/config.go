// Package config is the edge daemon's YAML configuration: a plain struct,
// defaults from DefaultConfig, Validate naming the field at fault, and Load /
// Parse that reject unknown fields by name.
//
//	cfg, err := config.Load("edge.yaml") // defaults, then the file, then Validate
//	if err != nil {
//		return err // e.g. `config: rules[1].window: bad duration "5xs"`
//	}
//	rules, _ := cfg.PopRules()
//
// A Config is a plain value: not safe for concurrent mutation, safe to read
// from many goroutines once built.
package config

import (
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// Config is the whole edge configuration. Field names are the YAML contract
// that users and tests rely on: fields may be added, never renamed.
type Config struct {
	// Node is this node's identity.
	Node Node `yaml:"node"`
	// Listen holds the listen addresses.
	Listen Listen `yaml:"listen"`
	// API configures the decision API's authentication.
	API API `yaml:"api"`
	// Proxy configures reverse-proxy mode (used when Listen.Proxy is set);
	// its trusted_proxies apply to the forward-auth listener too.
	Proxy Proxy `yaml:"proxy"`
	// ForwardAuth configures the forward-auth listener (used when
	// Listen.ForwardAuth is set).
	ForwardAuth ForwardAuth `yaml:"forward_auth"`
	// RLS configures the Envoy rate limit service (used when Listen.GRPC
	// is set).
	RLS RLS `yaml:"rls"`
	// SPOA configures the HAProxy agent (used when Listen.SPOA is set).
	SPOA SPOA `yaml:"spoa"`
	// NATS configures the NATS connection between PoPs and regions.
	NATS NATS `yaml:"nats"`
	// Gossip configures memberlist inside the PoP; nil for a one-node PoP.
	Gossip *Gossip `yaml:"gossip"`
	// Replication tunes delta flushing and partition detection: the
	// replication protocol's settings type, under the same field names.
	// flush_interval must be positive here: the daemon flushes on a timer.
	Replication repl.Settings `yaml:"replication"`
	// Limits caps memory and request sizes.
	Limits Limits `yaml:"limits"`
	// HTTP holds the HTTP server timeouts shared by the API and proxy listeners.
	HTTP HTTP `yaml:"http"`
	// State keeps the node's counts in a file across restarts.
	State State `yaml:"state"`
	// Idempotency configures idempotency keys: the header that carries
	// one, how long and how many decisions are remembered.
	Idempotency Idempotency `yaml:"idempotency"`
	// Shedding configures the node's load shedder (proxy mode and the
	// middleware); off unless max_in_flight is set.
	Shedding Shedding `yaml:"shedding"`
	// ModeAuthority says who may set rules' modes fleet-wide: Ed25519 keys
	// that sign and verify them; none by default.
	ModeAuthority ModeAuthority `yaml:"mode_authority"`
	// AllowRuleRemoval lets a reload remove half or more of the running
	// rules (a truncated or wrongly generated file looks like that). Without
	// it such a reload is refused and the old rules keep serving.
	AllowRuleRemoval bool `yaml:"allow_rule_removal"`
	// Rules are the rate-limit rules.
	Rules []Rule `yaml:"rules"`
}

// Node is this node's identity: the replica name is region/pop/id. Each
// name is 1-64 bytes without '.', '*', '>', '/', '#' or white space
// (identity.ValidName).
type Node struct {
	// ID names the node inside its PoP. Default: the host name, with each
	// character a name may not hold replaced by '-'.
	ID string `yaml:"id"`
	// Region is the node's region. Default "local".
	Region string `yaml:"region"`
	// PoP is the node's point of presence. Default "local".
	PoP string `yaml:"pop"`
}

// Listen holds listen addresses (host:port).
type Listen struct {
	// API serves the decision API, /metrics, /healthz, /readyz and status.
	// Default 127.0.0.1:8080.
	API string `yaml:"api"`
	// Proxy is the reverse-proxy listener; empty (the default) turns proxy mode off.
	Proxy string `yaml:"proxy"`
	// ForwardAuth is the forward-auth listener that nginx auth_request,
	// Traefik ForwardAuth and Caddy forward_auth ask, on any path; empty
	// (the default) turns it off.
	ForwardAuth string `yaml:"forward_auth"`
	// GRPC serves the Envoy rate limit service (RLS v3) over gRPC; empty
	// (the default) turns it off.
	GRPC string `yaml:"grpc"`
	// SPOA is the HAProxy agent (SPOE); empty (the default) turns it off.
	// Loopback only, unless spoa.insecure.
	SPOA string `yaml:"spoa"`
}

// API configures the decision API listener's authentication.
type API struct {
	// TokenFile holds bearer tokens, one per line (see ReadAPITokens), each
	// granting every scope. When it or Tokens is set, every API endpoint
	// but /healthz and /readyz requires "Authorization: Bearer <token>"
	// with a token of a scope that opens it. Several tokens
	// allow rotation. Required when listen.api is beyond loopback, unless
	// Insecure.
	TokenFile string `yaml:"token_file"`
	// Tokens are token files whose tokens grant only some scopes: a
	// metrics-only token for Prometheus, a decide-only one for an
	// application (see Scope). They count as TokenFile does for the
	// listeners beyond loopback.
	Tokens []APIToken `yaml:"tokens"`
	// Insecure lets listen.api listen beyond loopback without tokens:
	// whoever reaches the port can spend and read counts.
	Insecure bool `yaml:"insecure"`
}

// Proxy configures reverse-proxy mode.
type Proxy struct {
	// Upstream is the URL requests are forwarded to (http or https).
	Upstream string `yaml:"upstream"`
	// TrustedProxies are the CIDRs (or single addresses) whose
	// X-Forwarded-For is believed. Default: none.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// DialTimeout bounds connecting to the upstream; an upstream that is down
	// answers 502 after at most this long. Default 2s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers. Default 30s.
	ResponseHeaderTimeout Duration `yaml:"response_header_timeout"`
	// PreserveHost sends the client's Host header to the upstream instead
	// of the upstream URL's host (for upstreams that route by name).
	// Default false.
	PreserveHost bool `yaml:"preserve_host"`
}

// ForwardAuth configures the forward-auth listener.
type ForwardAuth struct {
	// DenyStatus is the status of a denied request (400-499) unless the
	// request asks for another with the X-Geolimit-Deny-Status header.
	// Default 429; nginx auth_request passes only 401 and 403 on.
	DenyStatus int `yaml:"deny_status"`
}

// MinDenyStatus and MaxDenyStatus bound forward_auth.deny_status and the
// X-Geolimit-Deny-Status header: a denial is a client error.
const (
	MinDenyStatus = 400
	MaxDenyStatus = 499
)

// Gossip configures memberlist.
type Gossip struct {
	// Bind is the memberlist bind address (host:port).
	Bind string `yaml:"bind"`
	// Join lists members to join at start (host:port).
	Join []string `yaml:"join"`
	// Advertise is the host:port other members reach this node on; empty
	// means bind (which must then not be a wildcard address).
	Advertise string `yaml:"advertise"`
	// SecretKeyFile holds the keys that encrypt and authenticate gossip,
	// one per line, base64 of 16, 24 or 32 bytes (see ReadGossipKeys): the
	// first encrypts, every one is accepted. Empty for none. Every member of
	// the PoP needs the key the others encrypt with. Required when Bind is
	// beyond loopback, unless Insecure.
	SecretKeyFile string `yaml:"secret_key_file"`
	// Insecure lets Bind listen beyond loopback without SecretKeyFile:
	// whoever reaches the port can join the PoP and inject counts.
	Insecure bool `yaml:"insecure"`
	// Label is stamped on every gossip packet; members with another label
	// are ignored. Default "geolimit/<region>/<pop>".
	Label string `yaml:"label"`
}

// Limits caps memory and request sizes.
type Limits struct {
	// MaxKeys caps live (rule, key) pairs. Default 1048576.
	MaxKeys int `yaml:"max_keys"`
	// MaxMemory is the node's memory budget in bytes: the store of counts
	// accounts for at most half of it, the rest is left for the Go heap's
	// garbage and the rest of the process. 0, the default, derives it
	// from the machine at start (MemoryBudget).
	MaxMemory int64 `yaml:"max_memory"`
	// MaxBodyBytes caps a decision API request body (larger bodies get
	// 413) and a rate limit service request message.
	// Default 1048576.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxBatch caps the checks of one POST /v1/checks and the descriptors
	// of one rate limit service request. Default 1000.
	MaxBatch int `yaml:"max_batch"`
	// MaxSkew is how far ahead of this node's clock a peer's may run before
	// its counts are ignored. Default 2s.
	MaxSkew Duration `yaml:"max_skew"`
}

// HTTP holds HTTP server limits, applied to the API and proxy listeners.
type HTTP struct {
	// ReadHeaderTimeout bounds reading request headers. Default 5s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request. Default 30s.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a response (for the proxy: the whole
	// upstream exchange). Default 60s.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout bounds keep-alive idleness. Default 120s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps request header size in bytes. Default 65536.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections caps the open connections of each listener (API,
	// proxy, forward auth, gRPC); further clients wait in the kernel's
	// accept queue until one closes. Default 10000.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerClient caps the open connections of one client
	// address on each listener: a connection beyond it is closed at once,
	// so that one address holding connections with stalled requests cannot
	// fill max_connections. A proxy in front counts as one client: raise
	// it to the connections its pools hold. Default 1000.
	MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
	// ShutdownTimeout bounds draining on SIGINT/SIGTERM. Default 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// DefaultConfig returns a fresh Config holding every default. It has no
// rules; DemoRules has the rule set used when no config file is given.
func DefaultConfig() *Config {
	replication := repl.DefaultSettings()
	replication.StartupSync = repl.DefaultStartupSync
	return &Config{
		Node:   Node{ID: defaultNodeID(), Region: "local", PoP: "local"},
		Listen: Listen{API: "127.0.0.1:8080"},
		Proxy: Proxy{
			DialTimeout:           Duration(2 * time.Second),
			ResponseHeaderTimeout: Duration(30 * time.Second),
		},
		ForwardAuth: ForwardAuth{DenyStatus: 429},
		NATS: NATS{
			Embedded:      Embedded{Listen: DefaultEmbeddedListen},
			SubjectPrefix: "geolimit",
		},
		Replication: replication,
		Limits: Limits{
			MaxKeys:      crdt.DefaultMaxKeys,
			MaxBodyBytes: 1 << 20,
			MaxBatch:     1000,
			MaxSkew:      Duration(pop.DefaultMaxSkew),
		},
		HTTP: HTTP{
			ReadHeaderTimeout:       Duration(5 * time.Second),
			ReadTimeout:             Duration(30 * time.Second),
			WriteTimeout:            Duration(60 * time.Second),
			IdleTimeout:             Duration(120 * time.Second),
			MaxHeaderBytes:          64 << 10,
			MaxConnections:          10000,
			MaxConnectionsPerClient: 1000,
			ShutdownTimeout:         Duration(10 * time.Second),
		},
		State:       State{Interval: Duration(DefaultStateInterval)},
		Idempotency: Idempotency{TTL: Duration(pop.DefaultIdempotencyTTL)},
		Shedding:    Shedding{RetryAfter: Duration(DefaultShedRetryAfter)},
	}
}

// demoYAML is the demo config, shipped as config/demo.yaml.
//
//go:embed demo.yaml
var demoYAML []byte

// Demo returns the demo config (config/demo.yaml): DefaultConfig with the
// demo rules.
// It is not validated here: the node's name comes from the host name, and
// the daemon validates the config it starts with.
func Demo() *Config {
	c := DefaultConfig()
	if err := decode(demoYAML, c); err != nil {
		panic("config: the embedded demo.yaml does not decode: " + err.Error()) // TestDemo keeps it decoding
	}
	c.ApplyRuleDefaults()
	return c
}

// PoPID returns the node's PoP.
func (n Node) PoPID() identity.PoPID { return identity.PoPID{Region: n.Region, PoP: n.PoP} }

// Replica returns the node's replica identity in an incarnation (a number
// new at every start).
func (n Node) Replica(incarnation uint64) identity.Replica {
	return identity.Replica{PoPID: n.PoPID(), Node: n.ID, Incarnation: incarnation}
}

func defaultNodeID() string {
	h, err := os.Hostname()
	if err != nil {
		return "edge"
	}
	return nameOf(h, "edge")
}

// nameOf returns s as a valid name (identity.ValidName): each character a name
// may not hold replaced by '-', cut to identity.MaxNameLen bytes; or def if
// nothing is left.
func nameOf(s, def string) string {
	var b strings.Builder
	for _, r := range s {
		c := string(r)
		if identity.ValidName(c) != nil {
			c = "-"
		}
		if b.Len()+len(c) > identity.MaxNameLen {
			break
		}
		b.WriteString(c)
	}
	if identity.ValidName(b.String()) != nil {
		return def
	}
	return b.String()
}

// Validate reports the first thing wrong with c, naming the field, e.g.
// "listen.api: missing port in address". It reads gossip.secret_key_file
// and api.token_file, and refuses a gossip, API or gRPC listener beyond
// loopback with neither its secret file nor its insecure flag.
func (c *Config) Validate() error {
	if _, err := c.ModeAuthority.Load(); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"node.id", c.Node.ID}, {"node.region", c.Node.Region}, {"node.pop", c.Node.PoP}} {
		if err := identity.ValidName(f.v); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := checkAddr(c.Listen.API, false); err != nil {
		return fmt.Errorf("listen.api: %w", err)
	}
	if c.Listen.Proxy != "" {
		if err := checkAddr(c.Listen.Proxy, false); err != nil {
			return fmt.Errorf("listen.proxy: %w", err)
		}
		if c.Proxy.Upstream == "" {
			return errors.New("proxy.upstream: required when listen.proxy is set")
		}
	}
	if c.Listen.ForwardAuth != "" {
		if err := checkAddr(c.Listen.ForwardAuth, false); err != nil {
			return fmt.Errorf("listen.forward_auth: %w", err)
		}
	}
	if s := c.ForwardAuth.DenyStatus; s < MinDenyStatus || s > MaxDenyStatus {
		return fmt.Errorf("forward_auth.deny_status: must be a 4xx status (%d-%d), got %d", MinDenyStatus, MaxDenyStatus, s)
	}
	if c.Proxy.Upstream != "" {
		u, err := url.Parse(c.Proxy.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("proxy.upstream: %q is not an http(s) URL with a host", c.Proxy.Upstream)
		}
	}
	if _, err := ParsePrefixes(c.Proxy.TrustedProxies); err != nil {
		return fmt.Errorf("proxy.%w", err)
	}
	if c.Proxy.DialTimeout <= 0 {
		return fmt.Errorf("proxy.dial_timeout: must be positive, got %s", c.Proxy.DialTimeout)
	}
	if c.Proxy.ResponseHeaderTimeout <= 0 {
		return fmt.Errorf("proxy.response_header_timeout: must be positive, got %s", c.Proxy.ResponseHeaderTimeout)
	}
	if err := c.NATS.validate(c.Node.Region); err != nil {
		return err
	}
	if c.Gossip != nil {
		if err := checkAddr(c.Gossip.Bind, false); err != nil {
			return fmt.Errorf("gossip.bind: %w", err)
		}
		for i, j := range c.Gossip.Join {
			if err := checkAddr(j, false); err != nil {
				return fmt.Errorf("gossip.join[%d]: %w", i, err)
			}
		}
		if c.Gossip.Advertise != "" {
			if err := checkAddr(c.Gossip.Advertise, false); err != nil {
				return fmt.Errorf("gossip.advertise: %w", err)
			}
		}
	}
	if err := c.validateAuth(); err != nil {
		return err
	}
	if err := c.Replication.Validate(); err != nil {
		return fmt.Errorf("replication.%w", err)
	}
	if c.Replication.FlushInterval == 0 {
		return errors.New("replication.flush_interval: must be positive, got 0s (the daemon flushes on a timer; 0, at once, is the simulator's reference)")
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{
		{"limits.max_skew", c.Limits.MaxSkew},
		{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout},
		{"http.read_timeout", c.HTTP.ReadTimeout},
		{"http.write_timeout", c.HTTP.WriteTimeout},
		{"http.idle_timeout", c.HTTP.IdleTimeout},
		{"http.shutdown_timeout", c.HTTP.ShutdownTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s: must be positive, got %s", d.name, d.v)
		}
	}
	switch {
	case c.Limits.MaxKeys < 1:
		return fmt.Errorf("limits.max_keys: must be at least 1, got %d", c.Limits.MaxKeys)
	case c.Limits.MaxMemory != 0 && c.Limits.MaxMemory < MinMaxMemory:
		return fmt.Errorf("limits.max_memory: must be 0 (derived from the machine) or at least %d bytes (64 MiB), got %d", MinMaxMemory, c.Limits.MaxMemory)
	case c.Limits.MaxBodyBytes < 64:
		return fmt.Errorf("limits.max_body_bytes: must be at least 64, got %d", c.Limits.MaxBodyBytes)
	case c.Limits.MaxBatch < 1:
		return fmt.Errorf("limits.max_batch: must be at least 1, got %d", c.Limits.MaxBatch)
	case c.HTTP.MaxConnections < 1:
		return fmt.Errorf("http.max_connections: must be at least 1, got %d", c.HTTP.MaxConnections)
	case c.HTTP.MaxConnectionsPerClient < 1:
		return fmt.Errorf("http.max_connections_per_client: must be at least 1, got %d", c.HTTP.MaxConnectionsPerClient)
	case c.HTTP.MaxHeaderBytes < 1024:
		return fmt.Errorf("http.max_header_bytes: must be at least 1024, got %d", c.HTTP.MaxHeaderBytes)
	}
	if err := c.State.validate(); err != nil {
		return err
	}
	if err := c.Idempotency.validate(); err != nil {
		return err
	}
	if err := ValidateRules(c.Rules); err != nil {
		return err
	}
	if err := c.Shedding.validate(); err != nil {
		return err
	}
	if err := c.validateSPOA(); err != nil {
		return err
	}
	return c.validateRLS()
}
