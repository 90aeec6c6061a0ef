package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/geolimit/geolimit/natsembed"
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
		pe *natsembed.PortError
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
	case errors.As(err, &pe) && pe.What == "client":
		return fmt.Errorf("nats.embedded.listen %s: %v: another process (a nats-server, another edge) holds it; "+
			"pick a free address (nats.embedded.listen, or edge -nats 127.0.0.1:4223), or set nats: {disabled: true} for a node that replicates nothing", pe.Addr, pe.Err)
	case errors.As(err, &pe):
		return fmt.Errorf("nats.embedded.gateway.listen %s: %v: another process holds it; pick a free address", pe.Addr, pe.Err)
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
