package natsembed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// TestEmbeddedExposure: a listener of the embedded server beyond loopback
// needs authentication (client port) or authorization and TLS (gateway),
// else the config is refused naming the field, unless the matching insecure
// switch is on. Loopback, the default, needs nothing.
func TestEmbeddedExposure(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"default", "", ""},
		{"loopback gateway", "nats: {embedded: {gateway: {listen: '127.0.0.1:7222'}}}", ""},
		{"client on every interface", "nats: {embedded: {listen: '0.0.0.0:4222'}}",
			"nats.embedded.listen: 0.0.0.0:4222 is beyond loopback without client authentication; configure users, nkeys or accounts (authorization) in nats.embedded.config_file or write nats.embedded.insecure: true"},
		{"client on an empty host", "nats: {embedded: {listen: ':4222'}}", "nats.embedded.listen: 0.0.0.0:4222 is beyond loopback"},
		{"client on a public address", "nats: {embedded: {listen: '192.0.2.10:4222'}}", "nats.embedded.listen: 192.0.2.10:4222 is beyond loopback"},
		{"client insecure", "nats: {embedded: {listen: '0.0.0.0:4222', insecure: true}}", ""},
		{"gateway on every interface", "nats: {embedded: {gateway: {listen: '0.0.0.0:7222'}}}",
			"nats.embedded.gateway.listen: 0.0.0.0:7222 is beyond loopback without gateway authorization and TLS; set them in nats.embedded.config_file or write nats.embedded.gateway.insecure: true"},
		{"gateway insecure", "nats: {embedded: {gateway: {listen: '0.0.0.0:7222', insecure: true}}}", ""},
		{"client insecure is not gateway insecure", "nats: {embedded: {insecure: true, gateway: {listen: '0.0.0.0:7222'}}}", "nats.embedded.gateway.listen: 0.0.0.0:7222 is beyond loopback"},
		{"gateway insecure is not client insecure", "nats: {embedded: {listen: '0.0.0.0:4222', gateway: {listen: '127.0.0.1:7222', insecure: true}}}", "nats.embedded.listen: 0.0.0.0:4222 is beyond loopback"},
		{"nats.url needs none", "nats: {url: 'nats://nats.example.net:4222', embedded: {listen: '0.0.0.0:4222'}}", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.in))
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// natsConf writes a nats-server config file and returns its path, with
// certificates for it in dir/certs (%CERT%, %KEY%, %CA% in body).
func natsConf(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if strings.Contains(body, "%") {
		ca := gossiptest.WriteCerts(t, filepath.Join(dir, "certs"), "eu")
		body = strings.NewReplacer("%CERT%", filepath.Join(dir, "certs", "eu-cert.pem"),
			"%KEY%", filepath.Join(dir, "certs", "eu-key.pem"), "%CA%", ca).Replace(body)
	}
	path := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestEmbeddedConfigFile(t *testing.T) {
	const users = `authorization { users: [{user: eu-ams, password: s3cret}] }
`
	const gateway = `gateway {
  name: eu
  listen: 0.0.0.0:7222
  authorization { user: gw, password: gwpass }
  tls { cert_file: "%CERT%", key_file: "%KEY%", ca_file: "%CA%", verify: true }
}
`
	// yaml is a config with the nats-server file, embedded lines (under
	// nats.embedded) and nats lines (under nats).
	yaml := func(file, embedded, nats string) string {
		return "node: {id: ams-1, region: eu, pop: ams}\nnats:\n" + nats + "  embedded:\n    config_file: " + file + "\n" + embedded
	}
	const node = "  user: eu-ams\n  password: s3cret\n"

	t.Run("the file's listeners, protected", func(t *testing.T) {
		f := natsConf(t, "listen: 0.0.0.0:4222\ntls { cert_file: \"%CERT%\", key_file: \"%KEY%\" }\n"+users+gateway)
		c, err := config.Parse([]byte(yaml(f, "", node)))
		require.NoError(t, err)
		assert.Empty(t, c.NATS.Embedded.Listen, "the file's client address, not the default")
		assert.Nil(t, c.NATS.Embedded.Gateway)
		o := FromConfig(c)
		assert.Equal(t, f, o.ConfigFile)
		assert.Equal(t, "eu", o.DefaultGatewayName)
	})
	t.Run("geolimit fills what the file leaves out", func(t *testing.T) {
		f := natsConf(t, users+"gateway { authorization { user: gw, password: gwpass } }\n")
		c, err := config.Parse([]byte(yaml(f, "    listen: 127.0.0.1:4333\n    gateway: {listen: '127.0.0.1:7222', gateways: [{name: us, urls: ['nats://127.0.0.1:7223']}]}\n", node)))
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:4333", c.NATS.Embedded.Listen)
		assert.Empty(t, c.NATS.Embedded.Gateway.Name, "left to the file, else node.region")
	})
	// The nats lines of the cases that do not use the node's user.
	natsLines := map[string]string{
		"node without credentials":            "",
		"node with an unknown user":           "  user: eu-fra\n  password: x\n",
		"node credentials file":               "  credentials: /etc/geolimit/edge.creds\n",
		"no auth, no node credentials needed": "",
	}
	for _, c := range []struct {
		name, conf, extra, want string
	}{
		{"conflict: client address", "listen: 127.0.0.1:4222\n" + users, "    listen: 127.0.0.1:4333\n",
			"nats.embedded.listen and nats.embedded.config_file (listen in %FILE%) both set the client listen address; keep one of them"},
		{"conflict: gateway name", users + "gateway { name: eu, listen: 127.0.0.1:7222 }\n", "    gateway: {name: eu}\n",
			"nats.embedded.gateway.name and nats.embedded.config_file (gateway.name in %FILE%) both set the gateway name"},
		{"conflict: gateway listen", users + "gateway { name: eu, listen: 127.0.0.1:7222 }\n", "    gateway: {listen: '127.0.0.1:7223'}\n",
			"nats.embedded.gateway.listen and nats.embedded.config_file (gateway.listen in %FILE%) both set the gateway listen address"},
		{"conflict: remote gateways", users + "gateway { name: eu, listen: 127.0.0.1:7222, gateways: [{name: us, urls: [\"nats://127.0.0.1:7223\"]}] }\n",
			"    gateway: {gateways: [{name: ap, urls: ['nats://127.0.0.1:7224']}]}\n",
			"nats.embedded.gateway.gateways and nats.embedded.config_file (gateway.gateways in %FILE%) both set the remote gateways"},
		{"gateway listen nowhere", users + "gateway { authorization { user: gw, password: gwpass } }\n", "",
			"nats.embedded.gateway.listen: required, here or as gateway.listen in nats.embedded.config_file %FILE%"},
		{"client port of the file without auth", "listen: 0.0.0.0:4222\n", "",
			"nats.embedded.config_file: listen 0.0.0.0:4222 is beyond loopback without client authentication"},
		{"gateway of the file without TLS", users + "gateway { name: eu, listen: 0.0.0.0:7222, authorization { user: gw, password: gwpass } }\n", "",
			"nats.embedded.config_file: gateway.listen 0.0.0.0:7222 is beyond loopback without TLS; set them (authorization, tls) in the file's gateway block or write nats.embedded.gateway.insecure: true"},
		{"gateway of the file, insecure", users + "gateway { name: eu, listen: 0.0.0.0:7222 }\n", "    gateway: {insecure: true}\n", ""},
		{"cluster of the file", users + "cluster { name: eu, listen: 0.0.0.0:6222 }\n", "",
			"nats.embedded.config_file: cluster.listen 0.0.0.0:6222 is beyond loopback without cluster authorization and TLS; set authorization and tls in the file's cluster block"},
		{"node without credentials", users, "", "nats.user: the embedded server's nats.embedded.config_file makes clients authenticate, this node too"},
		{"node with an unknown user", users, "", `nats.user: "eu-fra" is not a user of nats.embedded.config_file %FILE%`},
		{"node credentials file", users, "", ""},
		{"no auth, no node credentials needed", "listen: 127.0.0.1:4222\n", "", ""},
		{"syntax error", "authorization {\n  users: [\n", "", "nats.embedded.config_file: %FILE%"},
		{"unknown field", "listen: 127.0.0.1:4222\nbogus_setting: 1\n", "", "nats.embedded.config_file: %FILE%:2"},
		{"log file", "log_file: /tmp/nats.log\n", "", "nats.embedded.config_file: %FILE%: log_file: not supported: the embedded server logs through geolimit's log"},
		{"missing certificate", "tls { cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem }\n", "", "/nonexistent/cert.pem"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := natsConf(t, c.conf)
			n, ok := natsLines[c.name]
			if !ok {
				n = node
			}
			_, err := config.Parse([]byte(yaml(f, c.extra, n)))
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), strings.ReplaceAll(c.want, "%FILE%", f))
		})
	}
	t.Run("no such file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "missing.conf")
		_, err := config.Parse([]byte(yaml(f, "", node)))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nats.embedded.config_file: ")
		assert.Contains(t, err.Error(), f)
		assert.Contains(t, err.Error(), "no such file")
	})
	t.Run("with nats.url", func(t *testing.T) {
		f := natsConf(t, users)
		_, err := config.Parse([]byte("nats: {url: 'nats://127.0.0.1:4222', embedded: {config_file: " + f + "}}"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nats.embedded.config_file: no embedded server runs when nats.url is set")
	})
	t.Run("Load names the YAML file too", func(t *testing.T) {
		dir := t.TempDir()
		y := filepath.Join(dir, "edge.yaml")
		f := filepath.Join(dir, "missing.conf")
		require.NoError(t, os.WriteFile(y, []byte(yaml(f, "", node)), 0o600))
		_, err := config.Load(y)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "config: "+y+": nats.embedded.config_file: ")
	})
}
