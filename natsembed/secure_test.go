package natsembed

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

const exampleRel = "examples/secure-multi-region"

// secureExample copies examples/secure-multi-region to free ports with
// test certificates, and shortens the gateways' solicit delay.
func secureExample(t *testing.T) (*gossiptest.Example, string) {
	t.Helper()
	server.SetGatewaysSolicitDelay(10 * time.Millisecond)
	t.Cleanup(server.ResetGatewaysSolicitDelay)
	e := gossiptest.CopyExample(t, filepath.Join("..", exampleRel), exampleRel)
	ca := gossiptest.WriteCerts(t, filepath.Join(e.Dir, "certs"), "eu", "us", "ap")
	return e, ca
}

// logRecorder is a slog.Handler that keeps the messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count returns how many messages contain all of parts.
func (r *logRecorder) count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
next:
	for _, m := range r.msgs {
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		n++
	}
	return n
}

func (r *logRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// startRegion starts the example's nats-server of a region from its file.
func startRegion(t *testing.T, e *gossiptest.Example, region string, log *slog.Logger) *Server {
	t.Helper()
	s, err := Start(Options{ConfigFile: e.Path("nats-" + region + ".conf"), ServerName: region, Logger: log})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s
}

// poll is how often a test waiting for a condition checks it.
const poll = 2 * time.Millisecond

// Passwords of examples/secure-multi-region.
const (
	euAmsPassword   = "eu-ams-example-password"
	usIadPassword   = "us-iad-example-password"
	gatewayPassword = "gateway-example-password"
)

// asyncErrs collects a connection's asynchronous errors (permission
// violations).
type asyncErrs struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err.Error())
	a.mu.Unlock()
}

func (a *asyncErrs) has(s string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.errs {
		if strings.Contains(strings.ToLower(e), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// received collects the subjects of the messages a subscription gets.
type received struct {
	mu       sync.Mutex
	subjects []string
}

func (r *received) add(m *nats.Msg) {
	r.mu.Lock()
	r.subjects = append(r.subjects, m.Subject)
	r.mu.Unlock()
}

func (r *received) got(subject string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.subjects {
		if s == subject {
			return true
		}
	}
	return false
}

func (r *received) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.subjects...)
}

// TestSecureExampleAuth runs the nats-server configs of
// examples/secure-multi-region for regions eu and us, linked by their
// authenticated, mutually TLS'd gateway: clients without the right
// credentials cannot connect, and PoP eu/ams's credentials can publish only
// on eu/ams's own subjects: what it tries on us/iad's is refused by the
// server as a permissions violation and never reaches us/iad's subscriber,
// while its own messages do.
func TestSecureExampleAuth(t *testing.T) {
	e, ca := secureExample(t)
	euLog := &logRecorder{}
	eu := startRegion(t, e, "eu", slog.New(euLog))
	us := startRegion(t, e, "us", nil)
	require.Eventually(t, func() bool { return eu.NumOutboundGateways() >= 1 && us.NumOutboundGateways() >= 1 }, 15*time.Second, poll, "gateways eu <-> us")
	euURL := "nats://" + e.Addr(t, "127.0.0.1:4222")
	usURL := "nats://" + e.Addr(t, "127.0.0.1:4223")

	// Who may connect.
	for _, c := range []struct {
		name string
		url  string
		opts []nats.Option
		want string
	}{
		{"no credentials", euURL, []nats.Option{nats.RootCAs(ca)}, "authorization violation"},
		{"wrong password", euURL, []nats.Option{nats.RootCAs(ca), nats.UserInfo("eu-ams", "guess")}, "authorization violation"},
		{"another region's PoP", usURL, []nats.Option{nats.UserInfo("eu-ams", euAmsPassword)}, "authorization violation"},
		{"the gateway's credentials", usURL, []nats.Option{nats.UserInfo("gateway", gatewayPassword)}, "authorization violation"},
		{"no TLS trust", euURL, []nats.Option{nats.UserInfo("eu-ams", euAmsPassword)}, "certificate"},
		{"no credentials on loopback", usURL, nil, "authorization violation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, err := nats.Connect(c.url, append(c.opts, nats.Timeout(5*time.Second))...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			assert.Contains(t, strings.ToLower(err.Error()), c.want)
		})
	}

	// us/iad's node, on its region's server.
	iadErrs := &asyncErrs{}
	iad, err := nats.Connect(usURL, nats.UserInfo("us-iad", usIadPassword), nats.ErrorHandler(iadErrs.handler))
	require.NoError(t, err)
	defer iad.Close()
	got := &received{}
	for _, subj := range []string{"geolimit.delta.>", "geolimit.hb.>", "geolimit.sync.>", "geolimit.region.*.*", "geolimit.state.*.*.us.iad"} {
		_, err := iad.Subscribe(subj, got.add)
		require.NoError(t, err)
	}
	require.NoError(t, iad.Flush())

	// eu/ams's credentials, in region eu.
	amsErrs := &asyncErrs{}
	ams, err := nats.Connect(euURL, nats.RootCAs(ca), nats.UserInfo("eu-ams", euAmsPassword), nats.ErrorHandler(amsErrs.handler))
	require.NoError(t, err)
	defer ams.Close()
	forged := []string{
		"geolimit.delta.us.iad",        // iad's deltas
		"geolimit.hb.us.iad",           // its heartbeats
		"geolimit.sync.us.iad",         // its sync requests
		"geolimit.delta.eu.fra",        // another PoP of the same region
		"geolimit.region.us.iad",       // region us's totals (region voices)
		"geolimit.region.eu.fra",       // its own region's, as another PoP
		"geolimit.state.ap.sin.us.iad", // state relayed to iad as if by ap/sin
		"geolimit.state.us.iad.us.iad", // as if by iad itself
		"geolimit.anything.else",       // outside the PoP's subjects
	}
	for _, subj := range forged {
		require.NoError(t, ams.Publish(subj, []byte("forged")))
	}
	// Its own subjects, after the forged ones on the same connection: once
	// they arrive, the forged ones would have arrived before them.
	own := []string{"geolimit.delta.eu.ams", "geolimit.state.eu.ams.us.iad", "geolimit.region.eu.ams"}
	require.Eventually(t, func() bool {
		for _, subj := range own {
			if err := ams.Publish(subj, []byte("own")); err != nil {
				return false
			}
		}
		_ = ams.Flush()
		return got.got(own[0]) && got.got(own[1]) && got.got(own[2])
	}, 15*time.Second, poll, "eu/ams's own messages reach us/iad")
	for _, subj := range got.all() {
		assert.Contains(t, own, subj, "a message us/iad must not get")
	}
	for _, subj := range forged {
		require.Eventually(t, func() bool {
			return amsErrs.has(`permissions violation for publish to "` + subj + `"`)
		}, 15*time.Second, poll, "the violation on "+subj+" reported to the client")
	}
	assert.NotZero(t, euLog.count("Publish Violation", "geolimit.delta.us.iad"), "the server logs the violation")

	// Nor may eu/ams listen to what is relayed to another PoP.
	_, err = ams.Subscribe("geolimit.state.*.*.us.iad", func(*nats.Msg) {})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return amsErrs.has(`permissions violation for subscription to "geolimit.state.*.*.us.iad"`)
	}, 15*time.Second, poll, "the subscription refused")
	assert.False(t, iadErrs.has("violation"), "us/iad's permissions cover what it does")
}

// rogueConf writes the nats-server config of a rogue region "rogue" that
// gateways to eu. With tls it presents a certificate of the example's CA
// (as a leaked one would be); with password it authenticates as the
// example's gateways do.
func rogueConf(t *testing.T, e *gossiptest.Example, euGateway string, tls bool, password string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:-1\ngateway {\n  name: rogue\n  listen: 127.0.0.1:-1\n")
	if password != "" {
		b.WriteString("  authorization { user: gateway, password: \"" + password + "\" }\n")
	}
	if tls {
		c := filepath.Join(e.Dir, "certs")
		b.WriteString("  tls { cert_file: \"" + filepath.Join(c, "rogue-cert.pem") + "\", key_file: \"" + filepath.Join(c, "rogue-key.pem") +
			"\", ca_file: \"" + filepath.Join(c, "ca.pem") + "\", verify: true, timeout: 2 }\n")
	}
	b.WriteString("  gateways: [{name: eu, urls: [\"nats://" + euGateway + "\"]}]\n}\n")
	path := filepath.Join(t.TempDir(), "rogue.conf")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// TestRogueGateway points a rogue nats-server's gateway at region eu's
// gateway port of examples/secure-multi-region. Without TLS, or with a
// certificate of the right CA but without the gateway password, its
// gateway never connects and what is published on it never reaches eu;
// with the password it connects and its messages arrive (so the refusals
// are the credentials' doing).
func TestRogueGateway(t *testing.T) {
	e, _ := secureExample(t)
	gossiptest.WriteCerts(t, filepath.Join(e.Dir, "certs"), "eu", "us", "ap", "rogue")
	eu := startRegion(t, e, "eu", nil)
	euGateway := eu.GatewayAddr().String()
	ca := filepath.Join(e.Dir, "certs", "ca.pem")

	listener, err := nats.Connect("nats://"+e.Addr(t, "127.0.0.1:4222"), nats.RootCAs(ca), nats.UserInfo("eu-ams", euAmsPassword))
	require.NoError(t, err)
	defer listener.Close()
	got := &received{}
	_, err = listener.Subscribe("geolimit.delta.>", got.add)
	require.NoError(t, err)
	require.NoError(t, listener.Flush())

	inbound := func(name string) bool {
		gz, err := eu.NATS().Gatewayz(&server.GatewayzOptions{})
		require.NoError(t, err)
		return len(gz.InboundGateways[name]) > 0
	}
	const injected = "geolimit.delta.us.iad"
	for _, c := range []struct {
		name     string
		tls      bool
		password string
		connects bool
	}{
		{"no TLS, no password", false, "", false},
		{"no TLS, right password", false, gatewayPassword, false},
		{"TLS, no password", true, "", false},
		{"TLS, wrong password", true, "guess", false},
		{"TLS, right password", true, gatewayPassword, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rogueLog := &logRecorder{}
			defer func() {
				if t.Failed() {
					t.Log(rogueLog.String())
				}
			}()
			rogue, err := Start(Options{ConfigFile: rogueConf(t, e, euGateway, c.tls, c.password), Logger: slog.New(rogueLog)})
			require.NoError(t, err)
			defer rogue.Shutdown()
			pub, err := nats.Connect(rogue.ClientURL())
			require.NoError(t, err)
			defer pub.Close()
			publish := func() {
				require.NoError(t, pub.Publish(injected, []byte("injected by "+c.name)))
				require.NoError(t, pub.Flush())
			}
			if c.connects {
				require.Eventually(t, func() bool { return rogue.NumOutboundGateways() == 1 && inbound("rogue") }, 15*time.Second, poll, "the rogue gateway connected")
				require.Eventually(t, func() bool { publish(); return got.got(injected) }, 15*time.Second, poll, "its message reaches eu")
				return
			}
			// The attempt is refused: the rogue's gateway connection is
			// closed (by itself without TLS, by eu after the failed
			// authentication otherwise), and eu never holds it.
			linked := false
			require.Eventually(t, func() bool {
				publish()
				linked = linked || inbound("rogue") || eu.NumOutboundGateways() > 0
				return rogueLog.count("Gateway connection closed") >= 1
			}, 15*time.Second, poll, "the attempt refused")
			assert.False(t, linked, "eu accepted the rogue's gateway")
			if c.tls {
				assert.NotZero(t, rogueLog.count("Authorization Violation"), "refused for its credentials")
			}
			publish()
			assert.False(t, got.got(injected), "a message published on the rogue reached eu")
		})
	}
}
