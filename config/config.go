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
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/natsembed"
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
	// AllowRuleRemoval lets a reload remove more than half of the running
	// rules (a truncated or wrongly generated file looks like that). Without
	// it such a reload is refused and the old rules keep serving.
	AllowRuleRemoval bool `yaml:"allow_rule_removal"`
	// Rules are the rate-limit rules.
	Rules []Rule `yaml:"rules"`
}

// Node is this node's identity: the replica name is region/pop/id.
type Node struct {
	// ID names the node inside its PoP. Default: the host name.
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
}

// API configures the decision API listener's authentication.
type API struct {
	// TokenFile holds bearer tokens, one per line (see ReadAPITokens). When
	// set, every API endpoint but /healthz and /readyz requires
	// "Authorization: Bearer <token>" with one of them. Several tokens
	// allow rotation. Required when listen.api is beyond loopback, unless
	// Insecure.
	TokenFile string `yaml:"token_file"`
	// Insecure lets listen.api listen beyond loopback without TokenFile:
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

// NATS configures NATS.
type NATS struct {
	// Disabled runs the node without NATS: no embedded server, no link to
	// other PoPs (a single node, or a PoP on its own with gossip). Default
	// false.
	Disabled bool `yaml:"disabled"`
	// URL of the NATS server(s), comma-separated; empty (the default) starts
	// an embedded nats-server.
	URL string `yaml:"url"`
	// Embedded configures the embedded server (used when URL is empty).
	Embedded Embedded `yaml:"embedded"`
	// SubjectPrefix prefixes every subject. Default "geolimit".
	SubjectPrefix string `yaml:"subject_prefix"`
	// Credentials is a NATS credentials file (JWT and nkey seed) the node
	// authenticates with, to nats.url or to the embedded server.
	Credentials string `yaml:"credentials"`
	// User and Password authenticate the node with a user name and
	// password, to nats.url or to the embedded server.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// TLS configures TLS to nats.url; nil for none (or a tls:// URL with the
	// system roots). The node reaches its own embedded server in process,
	// without a socket, so TLS does not apply there.
	TLS *NATSTLS `yaml:"tls"`
}

// NATSTLS configures TLS to the NATS servers. Files are PEM.
type NATSTLS struct {
	// CAFile holds the CA certificates that sign the servers' certificates.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Embedded configures the embedded nats-server.
type Embedded struct {
	// ConfigFile is a nats-server configuration file (nats-server's own
	// format and parser: accounts, users, nkeys, permissions, TLS on the
	// client, cluster and gateway ports, gateway authorization). Listen
	// and Gateway fill only what it leaves out; setting the same thing in
	// both is an error. Empty: none.
	ConfigFile string `yaml:"config_file"`
	// Listen is the client listen address. Default 127.0.0.1:4222 (with
	// ConfigFile: the file's, else that default; Parse then leaves Listen
	// empty unless the YAML sets it). Port -1 or 0 picks a free port; an
	// empty host is every interface.
	Listen string `yaml:"listen"`
	// Insecure allows the client port to listen beyond loopback without
	// client authentication.
	Insecure bool `yaml:"insecure"`
	// Gateway links regions into a super-cluster; nil for none (or the
	// ConfigFile's gateway block).
	Gateway *Gateway `yaml:"gateway"`
}

// Gateway configures the embedded server's gateway.
type Gateway struct {
	// Name is this region's gateway name. Default: node.region (with
	// ConfigFile: the file's, else node.region).
	Name string `yaml:"name"`
	// Listen is the gateway listen address (host:port); required unless
	// ConfigFile sets it.
	Listen string `yaml:"listen"`
	// Gateways are the remote regions' gateways.
	Gateways []RemoteGateway `yaml:"gateways"`
	// Insecure allows the gateway to listen beyond loopback without gateway
	// authorization or without TLS.
	Insecure bool `yaml:"insecure"`
}

// RemoteGateway is one remote region's gateway.
type RemoteGateway struct {
	// Name is the remote gateway's name.
	Name string `yaml:"name"`
	// URLs are its gateway URLs (nats://host:port).
	URLs []string `yaml:"urls"`
}

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
	// ShutdownTimeout bounds draining on SIGINT/SIGTERM. Default 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// Rule is one rate-limit rule.
type Rule struct {
	// Name identifies the rule (1-64 bytes, no '/', quotes or white space).
	Name string `yaml:"name"`
	// Match selects the proxied requests the rule applies to; empty = all.
	Match Match `yaml:"match"`
	// Key says what forms the key in proxy mode: ip, header:<Name>, path or
	// host, or a list of these for a composite key. Default ip.
	Key KeySpec `yaml:"key"`
	// Limit is the most cost admitted per sliding window (>= 1).
	Limit uint64 `yaml:"limit"`
	// Window is the sliding window's width (>= 1ms, whole milliseconds).
	Window Duration `yaml:"window"`
	// Limits are several windows instead of limit and window (rulelimits.go).
	Limits []WindowLimit `yaml:"limits"`
	// Overrides give keys limits of their own.
	Overrides []Override `yaml:"overrides"`
	// Tier is where proxy mode and forward auth read a request's tier:
	// header:<Name>. Empty: no tier from requests.
	Tier string `yaml:"tier"`
	// Tiers map tier names to their limits.
	Tiers map[string]TierLimit `yaml:"tiers"`
	// DefaultTier names the tier of requests that name none or an unknown
	// one; empty means the rule's own limit(s).
	DefaultTier string `yaml:"default_tier"`
	// Cost is the cost of a request that names none. Default 1.
	Cost uint64 `yaml:"cost"`
	// Scope is node, pop or global. Default global.
	Scope string `yaml:"scope"`
	// Mode is enforce or shadow. Default enforce.
	Mode string `yaml:"mode"`
	// OnPartition is keep or share. Default keep.
	OnPartition string `yaml:"on_partition"`
	// BlockFor, when set, keeps a key the rule denies denied for that long
	// (the penalty box), on every node the rule's scope reaches (whole
	// milliseconds, at most 720h). Default 0: no penalty box.
	BlockFor Duration `yaml:"block_for"`
	// OnUnsure is allow or deny: what the rule answers when the node cannot
	// know a key's count (store full, counts not synced yet after a start,
	// no history under on_partition: share). Default allow.
	OnUnsure string `yaml:"on_unsure"`
}

// Match selects requests in proxy mode. Every non-empty field must match.
type Match struct {
	// PathPrefix matches paths that start with it.
	PathPrefix string `yaml:"path_prefix"`
	// Methods lists the HTTP methods matched (upper case).
	Methods []string `yaml:"methods"`
	// Host matches the request's host (case-insensitive, port ignored).
	Host string `yaml:"host"`
}

// Duration is a time.Duration written in Go syntax ("50ms", "1m"). A plain
// value.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d in Go syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText formats d in Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses Go duration syntax.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want Go syntax such as 50ms, 2s, 1m)", b)
	}
	*d = Duration(v)
	return nil
}

// KeySpec is a rule's key: one part or a composite of several.
type KeySpec []string

// Key parts.
const (
	KeyIP   = "ip"
	KeyPath = "path"
	KeyHost = "host"
	// KeyHeaderPrefix starts a header part: "header:X-Api-Key".
	KeyHeaderPrefix = "header:"
)

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
			ReadHeaderTimeout: Duration(5 * time.Second),
			ReadTimeout:       Duration(30 * time.Second),
			WriteTimeout:      Duration(60 * time.Second),
			IdleTimeout:       Duration(120 * time.Second),
			MaxHeaderBytes:    64 << 10,
			MaxConnections:    10000,
			ShutdownTimeout:   Duration(10 * time.Second),
		},
		State: State{Interval: Duration(DefaultStateInterval)},
	}
}

// DemoRules is the rule set of a node started without a config file.
func DemoRules() []Rule {
	return []Rule{
		{Name: "demo", Key: KeySpec{KeyIP}, Limit: 10, Window: Duration(10 * time.Second)},
		{Name: "api", Match: Match{PathPrefix: "/api"}, Key: KeySpec{KeyIP}, Limit: 100, Window: Duration(time.Minute)},
		{Name: "login", Match: Match{PathPrefix: "/login", Methods: []string{"POST"}}, Key: KeySpec{KeyIP}, Limit: 5, Window: Duration(time.Minute), Scope: "pop"},
	}
}

// Demo returns DefaultConfig with DemoRules and rule defaults applied.
func Demo() *Config {
	c := DefaultConfig()
	c.Rules = DemoRules()
	c.ApplyRuleDefaults()
	return c
}

func defaultNodeID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "edge"
	}
	return strings.NewReplacer("/", "-", "#", "-").Replace(h)
}

// ApplyRuleDefaults fills each rule's omitted cost, key, scope, mode and
// on_partition with their defaults.
func (c *Config) ApplyRuleDefaults() { RuleDefaults(c.Rules) }

// RuleDefaults fills the unset fields of rules with their defaults: cost 1,
// key ip, scope global, mode enforce, on_partition keep. The simulator's
// scenario files share this rule schema.
func RuleDefaults(rules []Rule) {
	for i := range rules {
		r := &rules[i]
		if r.Cost == 0 {
			r.Cost = 1
		}
		if len(r.Key) == 0 {
			r.Key = KeySpec{KeyIP}
		}
		if r.Scope == "" {
			r.Scope = "global"
		}
		if r.Mode == "" {
			r.Mode = "enforce"
		}
		if r.OnPartition == "" {
			r.OnPartition = "keep"
		}
		if r.OnUnsure == "" {
			r.OnUnsure = "allow"
		}
	}
}

// Validate reports the first thing wrong with c, naming the field, e.g.
// "listen.api: missing port in address". It reads gossip.secret_key_file
// and api.token_file, and refuses a gossip, API or gRPC listener beyond
// loopback with neither its secret file nor its insecure flag.
func (c *Config) Validate() error {
	if err := (crdt.Replica{Region: c.Node.Region, PoP: c.Node.PoP, Node: c.Node.ID}).Validate(); err != nil {
		for _, f := range []struct{ name, v string }{{"node.id", c.Node.ID}, {"node.region", c.Node.Region}, {"node.pop", c.Node.PoP}} {
			if f.v == "" || len(f.v) > crdt.MaxNameLen || strings.ContainsAny(f.v, "/#") {
				return fmt.Errorf("%s: %q must be 1-%d characters without '/' or '#'", f.name, f.v, crdt.MaxNameLen)
			}
		}
		return fmt.Errorf("node: %w", err)
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
	case c.Limits.MaxBodyBytes < 64:
		return fmt.Errorf("limits.max_body_bytes: must be at least 64, got %d", c.Limits.MaxBodyBytes)
	case c.Limits.MaxBatch < 1:
		return fmt.Errorf("limits.max_batch: must be at least 1, got %d", c.Limits.MaxBatch)
	case c.HTTP.MaxConnections < 1:
		return fmt.Errorf("http.max_connections: must be at least 1, got %d", c.HTTP.MaxConnections)
	case c.HTTP.MaxHeaderBytes < 1024:
		return fmt.Errorf("http.max_header_bytes: must be at least 1024, got %d", c.HTTP.MaxHeaderBytes)
	}
	if err := c.State.validate(); err != nil {
		return err
	}
	if err := ValidateRules(c.Rules); err != nil {
		return err
	}
	return c.validateRLS()
}

func (n *NATS) validate(region string) error {
	if n.Disabled {
		switch {
		case n.URL != "":
			return errors.New("nats.url: set while nats.disabled is true; remove one of them")
		case n.Embedded.ConfigFile != "" || n.Embedded.Gateway != nil:
			return errors.New("nats.embedded: configured while nats.disabled is true; remove one of them")
		}
	}
	if n.SubjectPrefix == "" || strings.ContainsAny(n.SubjectPrefix, " \t\r\n*>") ||
		strings.HasPrefix(n.SubjectPrefix, ".") || strings.HasSuffix(n.SubjectPrefix, ".") {
		return fmt.Errorf("nats.subject_prefix: %q must be a non-empty NATS subject without wildcards", n.SubjectPrefix)
	}
	if t := n.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("nats.tls: cert_file and key_file go together")
	}
	if n.URL != "" {
		for i, s := range strings.Split(n.URL, ",") {
			u, err := url.Parse(strings.TrimSpace(s))
			if err != nil || u.Host == "" {
				return fmt.Errorf("nats.url: entry %d %q is not a URL such as nats://127.0.0.1:4222", i, s)
			}
		}
		if n.Embedded.ConfigFile != "" {
			return errors.New("nats.embedded.config_file: no embedded server runs when nats.url is set; remove one of them")
		}
		return nil
	}
	e := &n.Embedded
	if e.ConfigFile == "" || e.Listen != "" {
		if err := checkAddr(e.Listen, true); err != nil {
			return fmt.Errorf("nats.embedded.listen: %w", err)
		}
	}
	if g := e.Gateway; g != nil {
		if g.Name == "" && e.ConfigFile == "" {
			return errors.New("nats.embedded.gateway.name: required")
		}
		if e.ConfigFile == "" || g.Listen != "" {
			if err := checkAddr(g.Listen, true); err != nil {
				return fmt.Errorf("nats.embedded.gateway.listen: %w", err)
			}
		}
		for i, r := range g.Gateways {
			if r.Name == "" {
				return fmt.Errorf("nats.embedded.gateway.gateways[%d].name: required", i)
			}
			if len(r.URLs) == 0 {
				return fmt.Errorf("nats.embedded.gateway.gateways[%d].urls: at least one URL required", i)
			}
			for j, s := range r.URLs {
				u, err := url.Parse(s)
				if err != nil || u.Host == "" {
					return fmt.Errorf("nats.embedded.gateway.gateways[%d].urls[%d]: %q is not a URL such as nats://127.0.0.1:7222", i, j, s)
				}
			}
		}
	}
	// The file (if any) and the exposure of every listener: the same
	// checks natsembed.Start makes.
	opts, _, err := natsembed.Resolve(n.EmbeddedOptions(region))
	if err != nil {
		return EmbeddedError(err)
	}
	if e.ConfigFile != "" && natsembed.AuthRequired(opts) {
		if n.Credentials == "" && n.User == "" {
			return errors.New("nats.user: the embedded server's nats.embedded.config_file makes clients authenticate, this node too: set nats.user and nats.password (or nats.credentials) to one of its users")
		}
		if n.User != "" && len(opts.Users) > 0 && len(opts.Nkeys) == 0 && len(opts.TrustedOperators) == 0 && len(opts.TrustedKeys) == 0 && opts.AuthCallout == nil {
			found := false
			for _, u := range opts.Users {
				found = found || u.Username == n.User
			}
			if !found {
				return fmt.Errorf("nats.user: %q is not a user of nats.embedded.config_file %s", n.User, e.ConfigFile)
			}
		}
	}
	return nil
}

// EmbeddedOptions returns the natsembed options of nats.embedded: the
// config file, the client address (with its default when no file is set),
// the gateway and the insecure switches. The caller adds ServerName and
// Logger.
func (c *Config) EmbeddedOptions() natsembed.Options { return c.NATS.EmbeddedOptions(c.Node.Region) }

// EmbeddedOptions returns the natsembed options of nats.embedded; region
// is the default gateway name.
func (n *NATS) EmbeddedOptions(region string) natsembed.Options {
	e := n.Embedded
	o := natsembed.Options{
		ConfigFile:         e.ConfigFile,
		Listen:             e.Listen,
		DefaultListen:      DefaultEmbeddedListen,
		Insecure:           e.Insecure,
		DefaultGatewayName: region,
	}
	if g := e.Gateway; g != nil {
		ng := &natsembed.Gateway{Name: g.Name, Listen: g.Listen, Insecure: g.Insecure}
		for _, r := range g.Gateways {
			ng.Gateways = append(ng.Gateways, natsembed.RemoteGateway{Name: r.Name, URLs: r.URLs})
		}
		o.Gateway = ng
	}
	return o
}

// DefaultEmbeddedListen is the embedded server's client address when
// neither nats.embedded.listen nor nats.embedded.config_file set one.
const DefaultEmbeddedListen = "127.0.0.1:4222"

// yamlField names the nats.embedded field of a natsembed option.
var yamlField = map[string]struct{ field, what string }{
	natsembed.OptListen:          {"nats.embedded.listen", "the client listen address"},
	natsembed.OptGatewayName:     {"nats.embedded.gateway.name", "the gateway name"},
	natsembed.OptGatewayListen:   {"nats.embedded.gateway.listen", "the gateway listen address"},
	natsembed.OptGatewayGateways: {"nats.embedded.gateway.gateways", "the remote gateways"},
}

// EmbeddedError restates an error of natsembed.Resolve or natsembed.Start,
// about options from EmbeddedOptions, in terms of the config's fields, e.g.
// "nats.embedded.gateway.listen: 0.0.0.0:7222 is beyond loopback without
// gateway authorization and TLS; ...". Other errors are returned as they are.
func EmbeddedError(err error) error {
	var (
		fe *natsembed.ConfigFileError
		ce *natsembed.ConflictError
		me *natsembed.MissingError
		xe *natsembed.ExposureError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return fmt.Errorf("nats.embedded.config_file: %w", fe)
	case errors.As(err, &ce):
		f := yamlField[ce.Option]
		return fmt.Errorf("%s and nats.embedded.config_file (%s in %s) both set %s; keep one of them", f.field, ce.FileKey, ce.File, f.what)
	case errors.As(err, &me):
		f := yamlField[me.Option]
		if me.File == "" {
			return fmt.Errorf("%s: required", f.field)
		}
		return fmt.Errorf("%s: required, here or as %s in nats.embedded.config_file %s", f.field, me.FileKey, me.File)
	case errors.As(err, &xe):
		return exposureError(xe)
	}
	return fmt.Errorf("nats.embedded: %s", strings.TrimPrefix(err.Error(), "natsembed: "))
}

func exposureError(e *natsembed.ExposureError) error {
	switch e.Listener {
	case natsembed.ListenerClient:
		where := "nats.embedded.listen: " + e.Addr
		if e.FromFile {
			where = "nats.embedded.config_file: listen " + e.Addr
		}
		return fmt.Errorf("%s is beyond loopback without client authentication; configure users, nkeys or accounts (authorization) in nats.embedded.config_file or write nats.embedded.insecure: true", where)
	case natsembed.ListenerWebsocket, natsembed.ListenerMQTT:
		return fmt.Errorf("nats.embedded.config_file: %s.listen %s is beyond loopback without client authentication; configure users, nkeys or accounts (authorization) in the file or write nats.embedded.insecure: true", e.Listener, e.Addr)
	case natsembed.ListenerGateway:
		missing := e.Missing()
		if e.NoAuth {
			missing = "gateway " + missing
		}
		if e.FromFile {
			return fmt.Errorf("nats.embedded.config_file: gateway.listen %s is beyond loopback without %s; set them (authorization, tls) in the file's gateway block or write nats.embedded.gateway.insecure: true", e.Addr, missing)
		}
		return fmt.Errorf("nats.embedded.gateway.listen: %s is beyond loopback without %s; set them in nats.embedded.config_file or write nats.embedded.gateway.insecure: true", e.Addr, missing)
	}
	missing := e.Missing()
	if e.NoAuth {
		missing = e.Listener + " " + missing
	}
	return fmt.Errorf("nats.embedded.config_file: %s.listen %s is beyond loopback without %s; set authorization and tls in the file's %s block", e.Listener, e.Addr, missing, e.Listener)
}

// checkAddr checks a host:port listen address; with randomOK, port -1 is
// accepted (pick a free port).
func checkAddr(addr string, randomOK bool) error {
	if addr == "" {
		return errors.New("required (host:port)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v", addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	p, err := strconv.Atoi(port)
	if err != nil && port != "" {
		if _, lerr := net.LookupPort("tcp", port); lerr == nil {
			return nil
		}
	}
	if err != nil || p > 65535 || p < -1 || (p == -1 && !randomOK) {
		return fmt.Errorf("%q: bad port %q", addr, port)
	}
	return nil
}

// ValidateRules checks rules as pop does (limit, window, cost, scope, mode,
// on_partition, unique names) plus the proxy fields (match, key). Omitted
// fields must have been defaulted (ApplyRuleDefaults).
func ValidateRules(rules []Rule) error {
	if _, err := PopRules(rules); err != nil {
		return err
	}
	for i, r := range rules {
		for j, m := range r.Match.Methods {
			if m == "" || m != strings.ToUpper(m) || strings.ContainsAny(m, " \t/:\"") {
				return fmt.Errorf("rules[%d].match.methods[%d]: %q is not an upper-case HTTP method", i, j, m)
			}
		}
		if p := r.Match.PathPrefix; p != "" && !strings.HasPrefix(p, "/") {
			return fmt.Errorf("rules[%d].match.path_prefix: %q must start with '/'", i, p)
		}
		if len(r.Key) == 0 {
			return fmt.Errorf("rules[%d].key: required", i)
		}
		if err := r.checkTier(); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
		for j, k := range r.Key {
			if err := checkKeyPart(k); err != nil {
				if len(r.Key) == 1 {
					return fmt.Errorf("rules[%d].key: %w", i, err)
				}
				return fmt.Errorf("rules[%d].key[%d]: %w", i, j, err)
			}
		}
	}
	return nil
}

func checkKeyPart(k string) error {
	switch {
	case k == KeyIP || k == KeyPath || k == KeyHost:
		return nil
	case strings.HasPrefix(k, KeyHeaderPrefix):
		h := k[len(KeyHeaderPrefix):]
		if h == "" || strings.ContainsAny(h, " \t\r\n:") {
			return fmt.Errorf("%q: header name missing or invalid", k)
		}
		return nil
	}
	return fmt.Errorf("unknown key %q (want ip, header:<Name>, path, host or a list of these)", k)
}

// PopRules converts the rules to pop rules, with errors naming the rule's
// index and field.
func (c *Config) PopRules() ([]pop.Rule, error) { return PopRules(c.Rules) }

// PopRules converts rules to pop rules, with errors naming the rule's index
// and field.
func PopRules(rules []Rule) ([]pop.Rule, error) {
	out := make([]pop.Rule, len(rules))
	for i, r := range rules {
		scope, err := pop.ParseScope(r.Scope)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].scope: %w", i, err)
		}
		mode, err := pop.ParseMode(r.Mode)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].mode: %w", i, err)
		}
		pol, err := pop.ParsePolicy(r.OnPartition)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].on_partition: %w", i, err)
		}
		unsure, err := pop.ParseUnsurePolicy(r.OnUnsure)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].on_unsure: %w", i, err)
		}
		out[i] = pop.Rule{Name: r.Name, Limit: r.Limit, Window: r.Window.D(), Cost: r.Cost, Scope: scope, Mode: mode, OnPartition: pol,
			BlockFor: r.BlockFor.D(), OnUnsure: unsure}
		if err := r.popLimits(&out[i]); err != nil {
			return nil, fmt.Errorf("rules[%d].%w", i, err)
		}
	}
	if err := pop.ValidateRules(out); err != nil {
		return nil, err
	}
	return out, nil
}

// ParsePrefixes parses trusted-proxy entries: CIDRs or single addresses.
// Errors read "trusted_proxies[i]: ...".
func ParsePrefixes(entries []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	for i, e := range entries {
		var p netip.Prefix
		var err error
		if strings.Contains(e, "/") {
			p, err = netip.ParsePrefix(e)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(e)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("trusted_proxies[%d]: %q is not an address or CIDR", i, e)
		}
		p = p.Masked()
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		out = append(out, p)
	}
	return out, nil
}

// Load reads the file at path: defaults, then the file, then rule defaults,
// then Validate.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := ParseFile(b)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, errors.Unwrap(err))
	}
	return c, nil
}

// ErrNoRules is ParseFile's error for a file without rules.
var ErrNoRules = errors.New("rules: at least one rule required (a file without rules, such as an empty or truncated one, would drop every count)")

// ParseFile is Parse for the content of a config file: a file must hold at
// least one rule, so that an empty or truncated file (caught mid-write by a
// reload) is refused instead of dropping every rule and its counts.
func ParseFile(b []byte) (*Config, error) {
	c, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if len(c.Rules) == 0 {
		return nil, fmt.Errorf("config: %w", ErrNoRules)
	}
	return c, nil
}

// Parse parses YAML over DefaultConfig, applies rule defaults and validates.
// Unknown fields are errors naming them.
func Parse(b []byte) (*Config, error) {
	c := DefaultConfig()
	// With nats.embedded.config_file, the file's client address wins over
	// the default: tell an unset listen from the default one.
	c.NATS.Embedded.Listen = ""
	if err := decode(b, c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if e := &c.NATS.Embedded; e.ConfigFile == "" {
		if e.Listen == "" {
			e.Listen = DefaultEmbeddedListen
		}
		if e.Gateway != nil && e.Gateway.Name == "" {
			e.Gateway.Name = c.Node.Region
		}
	}
	c.ApplyRuleDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}
