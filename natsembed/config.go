// The nats section of geolimit's config (config.NATS) as natsembed
// options, its checks against nats-server, and errors restated in terms of
// the config's fields.

package natsembed

import (
	"errors"
	"fmt"
	"strings"

	"github.com/geolimit/geolimit/config"
)

// Linking natsembed makes config.Validate check nats.embedded against the
// server Start would run (see config.RegisterEmbeddedCheck).
func init() { config.RegisterEmbeddedCheck(checkConfig) }

// checkConfig makes the checks of Start on the options of n's embedded
// section (the file, if any, and the exposure of every listener), and
// checks that the node can authenticate with the server the file protects.
// region is node.region.
func checkConfig(n *config.NATS, region string) error {
	e := &n.Embedded
	opts, _, err := Resolve(OptionsOf(n, region))
	if err != nil {
		return ConfigError(err)
	}
	if e.ConfigFile != "" && AuthRequired(opts) {
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

// FromConfig returns the options of c's nats.embedded section: the config
// file, the client address (with its default when no file is set), the
// gateway and the insecure switches. The caller adds ServerName and
// Logger.
func FromConfig(c *config.Config) Options { return OptionsOf(&c.NATS, c.Node.Region) }

// OptionsOf returns the options of n's embedded section; region is the
// default gateway name.
func OptionsOf(n *config.NATS, region string) Options {
	e := n.Embedded
	o := Options{
		ConfigFile:         e.ConfigFile,
		Listen:             e.Listen,
		DefaultListen:      config.DefaultEmbeddedListen,
		Insecure:           e.Insecure,
		DefaultGatewayName: region,
	}
	if g := e.Gateway; g != nil {
		ng := &Gateway{Name: g.Name, Listen: g.Listen, Insecure: g.Insecure}
		for _, r := range g.Gateways {
			ng.Gateways = append(ng.Gateways, RemoteGateway{Name: r.Name, URLs: r.URLs})
		}
		o.Gateway = ng
	}
	return o
}

// yamlField names the nats.embedded field of an option.
var yamlField = map[string]struct{ field, what string }{
	OptListen:          {"nats.embedded.listen", "the client listen address"},
	OptGatewayName:     {"nats.embedded.gateway.name", "the gateway name"},
	OptGatewayListen:   {"nats.embedded.gateway.listen", "the gateway listen address"},
	OptGatewayGateways: {"nats.embedded.gateway.gateways", "the remote gateways"},
}

// ConfigError restates an error of Resolve or Start, about options from
// FromConfig, in terms of the config's fields, e.g.
// "nats.embedded.gateway.listen: 0.0.0.0:7222 is beyond loopback without
// gateway authorization and TLS; ...". Other errors are returned as they are.
func ConfigError(err error) error {
	var (
		fe *ConfigFileError
		ce *ConflictError
		me *MissingError
		xe *ExposureError
		pe *PortError
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

func exposureError(e *ExposureError) error {
	switch e.Listener {
	case ListenerClient:
		where := "nats.embedded.listen: " + e.Addr
		if e.FromFile {
			where = "nats.embedded.config_file: listen " + e.Addr
		}
		return fmt.Errorf("%s is beyond loopback without client authentication; configure users, nkeys or accounts (authorization) in nats.embedded.config_file or write nats.embedded.insecure: true", where)
	case ListenerWebsocket, ListenerMQTT:
		return fmt.Errorf("nats.embedded.config_file: %s.listen %s is beyond loopback without client authentication; configure users, nkeys or accounts (authorization) in the file or write nats.embedded.insecure: true", e.Listener, e.Addr)
	case ListenerGateway:
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
