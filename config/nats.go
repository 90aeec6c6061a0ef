package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
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
	// The file (if any), the exposure of every listener and the node's
	// credentials, when the program links the embedded server.
	if embeddedCheck != nil {
		return embeddedCheck(n, region)
	}
	return nil
}

// DefaultEmbeddedListen is the embedded server's client address when
// neither nats.embedded.listen nor nats.embedded.config_file set one.
const DefaultEmbeddedListen = "127.0.0.1:4222"

// embeddedCheck checks nats.embedded against the nats-server that would
// run it; nil until RegisterEmbeddedCheck.
var embeddedCheck func(n *NATS, region string) error

// RegisterEmbeddedCheck makes Validate check nats.embedded against the
// nats-server that would run it: its config file read by nats-server's own
// parser, the exposure of every listener, the node's credentials against
// the file's users. Package natsembed registers it when it is linked, as a
// hash package registers itself with crypto.RegisterHash: a program that
// cannot start an embedded server (one that uses only the middleware
// package) does not link nats-server to check a section it never uses, and
// Validate checks only the form of that section there. Call it from an init
// function; region is node.region (the default gateway name).
func RegisterEmbeddedCheck(check func(n *NATS, region string) error) { embeddedCheck = check }
