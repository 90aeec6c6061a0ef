package natsembed

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

func writeConf(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestResolveMerge: the file's settings, geolimit's settings and defaults
// where the file says nothing, and an error where both set the same thing.
func TestResolveMerge(t *testing.T) {
	t.Run("defaults fill what the file leaves out", func(t *testing.T) {
		f := writeConf(t, `authorization { user: a, password: b }
gateway { authorization { user: gw, password: pw } }`)
		opts, _, err := Resolve(Options{ConfigFile: f, DefaultListen: "127.0.0.1:4222", ServerName: "eu-ams-1",
			DefaultGatewayName: "eu", Gateway: &Gateway{Listen: "127.0.0.1:7222",
				Gateways: []RemoteGateway{{Name: "us", URLs: []string{"nats://127.0.0.1:7223"}}}}})
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", opts.Host)
		assert.Equal(t, 4222, opts.Port)
		assert.Equal(t, "eu-ams-1", opts.ServerName)
		assert.Equal(t, "eu", opts.Gateway.Name)
		assert.Equal(t, "127.0.0.1", opts.Gateway.Host)
		assert.Equal(t, 7222, opts.Gateway.Port)
		assert.Equal(t, "gw", opts.Gateway.Username, "the file's gateway authorization")
		require.Len(t, opts.Gateway.Gateways, 1)
		assert.Equal(t, "us", opts.Gateway.Gateways[0].Name)
		assert.True(t, opts.NoSigs)
		assert.Equal(t, "a", opts.Username)
	})
	t.Run("the file's own settings", func(t *testing.T) {
		f := writeConf(t, `server_name: from-file
listen: 127.0.0.1:4333
gateway { name: eu, listen: "127.0.0.1:7333", gateways: [{name: us, urls: ["nats://127.0.0.1:7334"]}] }`)
		opts, _, err := Resolve(Options{ConfigFile: f, DefaultListen: "127.0.0.1:4222", ServerName: "eu-ams-1", DefaultGatewayName: "x"})
		require.NoError(t, err)
		assert.Equal(t, "from-file", opts.ServerName)
		assert.Equal(t, 4333, opts.Port)
		assert.Equal(t, "eu", opts.Gateway.Name)
		assert.Equal(t, 7333, opts.Gateway.Port)
	})
	t.Run("a port alone in the file takes nats-server's default host", func(t *testing.T) {
		f := writeConf(t, "port: 4444\n")
		_, _, err := Resolve(Options{ConfigFile: f, DefaultListen: "127.0.0.1:4222"})
		var xe *ExposureError
		require.ErrorAs(t, err, &xe, "0.0.0.0 without authentication")
		assert.Equal(t, ListenerClient, xe.Listener)
		assert.Equal(t, "0.0.0.0:4444", xe.Addr)
		assert.True(t, xe.FromFile)
	})
	for _, c := range []struct {
		name, conf string
		o          Options
		option     string
		fileKey    string
	}{
		{"client listen", "listen: 127.0.0.1:4333", Options{Listen: "127.0.0.1:4222"}, OptListen, "listen"},
		{"client port", "port: 4333", Options{Listen: "127.0.0.1:4222"}, OptListen, "listen"},
		{"gateway name", "gateway { name: eu, listen: 127.0.0.1:7222 }", Options{Gateway: &Gateway{Name: "eu"}}, OptGatewayName, "gateway.name"},
		{"gateway listen", "gateway { name: eu, port: 7222 }", Options{Gateway: &Gateway{Listen: "127.0.0.1:7222"}}, OptGatewayListen, "gateway.listen"},
		{"remote gateways", `gateway { name: eu, listen: 127.0.0.1:7222, gateways: [{name: us, urls: ["nats://127.0.0.1:7223"]}] }`,
			Options{Gateway: &Gateway{Gateways: []RemoteGateway{{Name: "us", URLs: []string{"nats://127.0.0.1:7223"}}}}}, OptGatewayGateways, "gateway.gateways"},
	} {
		t.Run("conflict: "+c.name, func(t *testing.T) {
			c.o.ConfigFile = writeConf(t, c.conf)
			_, _, err := Resolve(c.o)
			var ce *ConflictError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, c.option, ce.Option)
			assert.Equal(t, c.fileKey, ce.FileKey)
			assert.Equal(t, c.o.ConfigFile, ce.File)
			assert.Contains(t, err.Error(), c.o.ConfigFile)
		})
	}
	t.Run("gateway without listen", func(t *testing.T) {
		f := writeConf(t, "gateway { name: eu, authorization { user: gw, password: pw } }")
		_, _, err := Resolve(Options{ConfigFile: f})
		var me *MissingError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, OptGatewayListen, me.Option)
		assert.Equal(t, "gateway.listen", me.FileKey)
	})
	t.Run("gateway without name", func(t *testing.T) {
		f := writeConf(t, "gateway { listen: 127.0.0.1:7222 }")
		_, _, err := Resolve(Options{ConfigFile: f})
		var me *MissingError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, OptGatewayName, me.Option)
		opts, _, err := Resolve(Options{ConfigFile: f, DefaultGatewayName: "eu"})
		require.NoError(t, err)
		assert.Equal(t, "eu", opts.Gateway.Name)
	})
}

func TestResolveBadFile(t *testing.T) {
	for _, c := range []struct {
		name, conf string
		key        string
		want       []string
	}{
		{"syntax", "listen: 127.0.0.1:4222\nauthorization {\n  users: [\n", "", []string{"nats.conf"}},
		{"unknown field", "listen: 127.0.0.1:4222\nbogus_setting: 1\n", "", []string{"nats.conf:2", "bogus_setting"}},
		{"missing certificate", "tls { cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem }\n", "", []string{"nats.conf", "/nonexistent/cert.pem"}},
		{"log file", "log_file: /tmp/nats.log\n", "log_file", []string{"nats.conf: log_file: not supported"}},
		{"syslog", "syslog: true\n", "syslog", []string{"syslog: not supported"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := writeConf(t, c.conf)
			_, _, err := Resolve(Options{ConfigFile: f})
			var fe *ConfigFileError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, f, fe.File)
			assert.Equal(t, c.key, fe.Key)
			assert.True(t, strings.HasPrefix(err.Error(), f), err.Error())
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	t.Run("no such file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "missing.conf")
		_, _, err := Resolve(Options{ConfigFile: f})
		var fe *ConfigFileError
		require.ErrorAs(t, err, &fe)
		assert.True(t, errors.Is(err, os.ErrNotExist), err.Error())
		assert.Contains(t, err.Error(), f)
	})
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true, "localhost": false, "::ffff:127.0.0.1": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "192.0.2.1": false, "nats.example.net": false, "128.0.0.1": false,
	} {
		assert.Equal(t, want, IsLoopback(host), host)
	}
}

// TestExposure: what may listen beyond loopback, and with what. Only
// Resolve runs: nothing listens.
func TestExposure(t *testing.T) {
	const (
		users = "authorization { users: [{user: a, password: b}] }\n"
		tls   = "tls { cert_file: %CERT%, key_file: %KEY% }\n"
		gwTLS = "tls { cert_file: %CERT%, key_file: %KEY% }"
	)
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	gossiptest.WriteCerts(t, certs, "eu")
	fill := func(s string) string {
		return strings.NewReplacer("%CERT%", filepath.Join(certs, "eu-cert.pem"), "%KEY%", filepath.Join(certs, "eu-key.pem")).Replace(s)
	}
	for _, c := range []struct {
		name     string
		conf     string // "" for no file
		o        Options
		listener string // "" for accepted
		noAuth   bool
		noTLS    bool
		warn     string
	}{
		{"loopback, no auth", "", Options{Listen: "127.0.0.1:4222", Gateway: &Gateway{Name: "eu", Listen: "127.0.0.1:7222"}}, "", false, false, ""},
		{"::1", "", Options{Listen: "[::1]:4222", Gateway: &Gateway{Name: "eu", Listen: "[::1]:7222"}}, "", false, false, ""},
		{"localhost is a name, not loopback", "", Options{Listen: "localhost:4222"}, ListenerClient, true, false, ""},
		{"client on every interface", "", Options{Listen: "0.0.0.0:4222"}, ListenerClient, true, false, ""},
		{"client on an empty host", "", Options{Listen: ":4222"}, ListenerClient, true, false, ""},
		{"client on [::]", "", Options{Listen: "[::]:4222"}, ListenerClient, true, false, ""},
		{"client on an address", "", Options{Listen: "192.0.2.1:4222"}, ListenerClient, true, false, ""},
		{"client insecure", "", Options{Listen: "0.0.0.0:4222", Insecure: true}, "", false, false, "without TLS"},
		{"client with users", users, Options{Listen: "0.0.0.0:4222"}, "", false, false, "without TLS"},
		{"client with users and TLS", users + tls, Options{Listen: "0.0.0.0:4222"}, "", false, false, ""},
		{"no_auth_user lets anyone in", "authorization { users: [{user: a, password: b}] }\nno_auth_user: a\n", Options{Listen: "0.0.0.0:4222"}, ListenerClient, true, false, ""},
		{"client TLS without auth", tls, Options{Listen: "0.0.0.0:4222"}, ListenerClient, true, false, ""},
		{"client verified certificates", "tls { cert_file: %CERT%, key_file: %KEY%, ca_file: %CERT%, verify: true }\n", Options{Listen: "0.0.0.0:4222"}, "", false, false, ""},
		{"gateway bare", "", Options{Gateway: &Gateway{Name: "eu", Listen: "0.0.0.0:7222"}}, ListenerGateway, true, true, ""},
		{"gateway insecure", "", Options{Gateway: &Gateway{Name: "eu", Listen: "0.0.0.0:7222", Insecure: true}}, "", false, false, ""},
		{"gateway authorization only", "gateway { authorization { user: gw, password: pw } }", Options{Gateway: &Gateway{Name: "eu", Listen: "0.0.0.0:7222"}}, ListenerGateway, false, true, ""},
		{"gateway TLS only", "gateway { " + gwTLS + " }", Options{Gateway: &Gateway{Name: "eu", Listen: "0.0.0.0:7222"}}, ListenerGateway, true, false, ""},
		{"gateway authorization and TLS", "gateway { authorization { user: gw, password: pw }, " + gwTLS + " }", Options{Gateway: &Gateway{Name: "eu", Listen: "0.0.0.0:7222"}}, "", false, false, ""},
		{"gateway from the file", "gateway { name: eu, port: 7222 }", Options{}, ListenerGateway, true, true, ""},
		{"cluster", "cluster { name: c, listen: 0.0.0.0:6222 }", Options{}, ListenerCluster, true, true, ""},
		{"cluster protected", "cluster { name: c, listen: 0.0.0.0:6222, authorization { user: r, password: p }, " + gwTLS + " }", Options{}, "", false, false, ""},
		{"cluster on loopback", "cluster { name: c, listen: 127.0.0.1:6222 }", Options{}, "", false, false, ""},
		{"leafnodes", "leafnodes { listen: 0.0.0.0:7422 }", Options{}, ListenerLeafnodes, true, true, ""},
		{"websocket", "websocket { listen: 0.0.0.0:8443, no_tls: true }", Options{}, ListenerWebsocket, true, false, ""},
		{"websocket with users", users + "websocket { listen: 0.0.0.0:8443, no_tls: true }", Options{}, "", false, false, ""},
		{"websocket behind a client certificate check only", "tls { cert_file: %CERT%, key_file: %KEY%, ca_file: %CERT%, verify: true }\nwebsocket { listen: 0.0.0.0:8443, no_tls: true }", Options{}, ListenerWebsocket, true, false, ""},
		{"mqtt behind a client certificate check only", "tls { cert_file: %CERT%, key_file: %KEY%, ca_file: %CERT%, verify: true }\nmqtt { listen: 0.0.0.0:1883 }", Options{}, ListenerMQTT, true, false, ""},
		{"monitoring", "http: 0.0.0.0:8222", Options{}, "", false, false, "monitoring port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			if c.conf != "" {
				o.ConfigFile = writeConf(t, fill(c.conf))
			}
			_, warnings, err := Resolve(o)
			if c.listener == "" {
				require.NoError(t, err)
				if c.warn == "" {
					assert.Empty(t, warnings)
				} else {
					require.Len(t, warnings, 1)
					assert.Contains(t, warnings[0], c.warn)
				}
				return
			}
			var xe *ExposureError
			require.ErrorAs(t, err, &xe)
			assert.Equal(t, c.listener, xe.Listener)
			assert.Equal(t, c.noAuth, xe.NoAuth, "no auth")
			assert.Equal(t, c.noTLS, xe.NoTLS, "no TLS")
			assert.Contains(t, err.Error(), "beyond loopback")
		})
	}
}
