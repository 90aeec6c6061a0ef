package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/natsembed"
	"github.com/geolimit/geolimit/repl"
)

// syncLog is a text log safe for concurrent writers.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecureExampleReplication replicates between PoP eu/ams and PoP us/iad
// through the nats-servers of examples/secure-multi-region (regions eu and
// us, linked by their authenticated, mutually TLS'd gateway), each node
// with its PoP's credentials, which allow it to publish only on its own
// subjects: eu/ams over TLS to eu's client port, us/iad in process to us's
// server. Counts replicate both ways, and when us/iad's only node restarts,
// eu/ams relays its former incarnation's counts back to it; no permission
// is ever violated.
func TestSecureExampleReplication(t *testing.T) {
	const rel = "examples/secure-multi-region"
	e := gossiptest.CopyExample(t, filepath.Join("..", rel), rel)
	ca := gossiptest.WriteCerts(t, filepath.Join(e.Dir, "certs"), "eu", "us", "ap")
	servers := map[string]*natsembed.Server{}
	for _, region := range []string{"eu", "us"} {
		s, err := natsembed.Start(natsembed.Options{ConfigFile: e.Path("nats-" + region + ".conf"), ServerName: region})
		require.NoError(t, err)
		t.Cleanup(s.Shutdown)
		servers[region] = s
	}
	require.Eventually(t, func() bool {
		return servers["eu"].NumOutboundGateways() >= 1 && servers["us"].NumOutboundGateways() >= 1
	}, 10*time.Second, poll, "gateways eu <-> us")
	logs := &syncLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	opts := func(cfg NATSConfig) Options {
		cfg.ReconnectWait, cfg.PingInterval, cfg.Logger = 50*time.Millisecond, time.Second, log
		return Options{
			Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: 500 * time.Millisecond},
			Global:   NATSConnect(cfg),
		}
	}
	amsCfg := NATSConfig{Self: a, Name: "ams-1", URL: "tls://" + e.Addr(t, "127.0.0.1:4222"), RootCAs: []string{ca},
		User: "eu-ams", Password: "eu-ams-example-password"}
	iadCfg := NATSConfig{Self: b, Name: "iad-1", URL: servers["us"].ClientURL(), InProcess: servers["us"],
		User: "us-iad", Password: "us-iad-example-password"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "ams-1", testRules()), opts(amsCfg))
	mb := startMember(t, ctx, newNode(t, b.Region, b.PoP, "iad-1", testRules()), opts(iadCfg))

	mb2 := restartLonePoP(t, ma, mb, func() *member {
		return startMember(t, ctx, newNode(t, b.Region, b.PoP, "iad-1", testRules()), opts(iadCfg))
	})
	assert.NotZero(t, ma.rep.Status().Protocol.Relays, "relayed by eu/ams, on its own state subject")
	for _, m := range []*member{ma, mb2} {
		st := m.rep.Stats()[0]
		assert.Zero(t, st.Forged, m.name)
		assert.Zero(t, st.Rejected, m.name)
		assert.Zero(t, st.SendErrors, m.name)
	}
	assert.NotContains(t, strings.ToLower(logs.String()), "violation")
}
