package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

func natsOpts(url string, id identity.PoPID, name string) Options {
	return Options{
		Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: 500 * time.Millisecond},
		Global: NATSConnect(NATSConfig{
			Self: id, Name: name, URL: url,
			ReconnectWait: 50 * time.Millisecond, PingInterval: time.Second,
		}),
	}
}

// TestNATSTwoPoPs replicates a global rule between two PoPs over one real
// nats-server; pop and node rules stay home.
func TestNATSTwoPoPs(t *testing.T) {
	_, _, ma, mb := natsPair(t)
	for i := range 100 {
		m := ma
		if i%3 == 0 {
			m = mb
		}
		for _, rule := range []string{"api", "per-ip", "local"} {
			_, err := m.node.Decide(time.Now().UnixNano(), rule, "k", 1)
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 100 && total(mb.node, "api", "k") == 100
	}, 10*time.Second, poll, "global rule converged")
	require.Eventually(t, func() bool {
		return len(ma.rep.Heard()) == 1 && len(mb.rep.Heard()) == 1
	}, 10*time.Second, poll, "heard each other")
	assert.Equal(t, uint64(66), total(ma.node, "per-ip", "k"), "pop rule must not cross PoPs")
	assert.Equal(t, uint64(34), total(mb.node, "per-ip", "k"))
	assert.Equal(t, uint64(66), total(ma.node, "local", "k"))
	st := ma.rep.Status()
	require.Len(t, st.Transports, 1)
	assert.Equal(t, "nats", st.Transports[0].Transport)
	assert.NotZero(t, st.Transports[0].BytesSent)
	assert.NotZero(t, st.Transports[0].LagCount)
	assert.Zero(t, st.Transports[0].Rejected)
}

// TestNATSForgedDelta publishes, on PoP iad's subject, a delta whose sender
// claims to be of PoP ams: it is rejected and counted, nothing merges.
func TestNATSForgedDelta(t *testing.T) {
	s := startNATS(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := identity.PoPID{Region: "eu", PoP: "ams"}
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "ams-1", testRules()), natsOpts(s.ClientURL(), a, "ams-1"))
	// The member's subscriptions must be in place at the server before the
	// forged messages are published (core NATS keeps nothing for later).
	gossiptest.WaitInterest(t, s, DeltaSubject("", identity.PoPID{Region: "us", PoP: "iad"}))
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	forged := wire.Delta{
		Sender:  identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "fra"}, Node: "fra-1", Incarnation: 1},
		SentAt:  time.Now().UnixNano(),
		Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: time.Now().UnixNano() / int64(time.Hour), Count: 1000}},
	}
	msgs, err := wire.Encode(&forged, 0)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(DeltaSubject("", identity.PoPID{Region: "us", PoP: "iad"}), msgs[0]))
	// Garbage on a delta subject and on a subject of no PoP.
	require.NoError(t, nc.Publish(DeltaSubject("", identity.PoPID{Region: "us", PoP: "iad"}), []byte{0x94, 0xff, 0x00}))
	require.NoError(t, nc.Publish("geolimit.delta.x", msgs[0]))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		st := ma.rep.Stats()[0]
		return st.Forged == 1 && st.Rejected == 1 && st.DecodeErrors == 1
	}, 10*time.Second, poll, "forged delta counted")
	assert.Zero(t, total(ma.node, "api", "k"))
	// A pop-scope entry that does come from its own subject is refused too.
	fra := identity.PoPID{Region: "eu", PoP: "fra"}
	forged.Entries[0].Rule = "per-ip"
	msgs, err = wire.Encode(&forged, 0)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(DeltaSubject("", fra), msgs[0]))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return ma.rep.Stats()[0].Rejected == 2 }, 10*time.Second, poll, "pop entry via nats refused")
	assert.Zero(t, total(ma.node, "per-ip", "k"))
}

// TestNATSServerRestart stops the nats-server under two PoPs: both keep
// deciding locally, reconnect when it is back and resync the counts made
// while it was down (nothing is buffered, so only the anti-entropy round on
// reconnect can deliver them).
func TestNATSServerRestart(t *testing.T) {
	s := startNATS(t, nil)
	port := clientPort(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	opts := func(id identity.PoPID, name string) Options {
		o := natsOpts(s.ClientURL(), id, name)
		o.Global = NATSConnect(NATSConfig{Self: id, Name: name, URL: s.ClientURL(), ReconnectBufSize: -1, ReconnectWait: 20 * time.Millisecond, PingInterval: time.Second})
		return o
	}
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "ams-1", testRules()), opts(a, "ams-1"))
	mb := startMember(t, ctx, newNode(t, b.Region, b.PoP, "iad-1", testRules()), opts(b, "iad-1"))
	decide := func(m *member, n int) {
		for range n {
			d, err := m.node.Decide(time.Now().UnixNano(), "api", "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	decide(ma, 10)
	decide(mb, 10)
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 20 && total(mb.node, "api", "k") == 20
	}, 10*time.Second, poll, "converged before the restart")
	s.Shutdown()
	s.WaitForShutdown()
	resyncs := ma.rep.Status().Resyncs
	// Decisions go on locally while the server is gone.
	decide(ma, 7)
	decide(mb, 5)
	assert.Equal(t, uint64(27), total(ma.node, "api", "k"))
	errs := ma.rep.Stats()[0].SendErrors
	require.Eventually(t, func() bool { return ma.rep.Stats()[0].SendErrors > errs }, 10*time.Second, poll, "the flush of the outage's counts failed")

	restartNATS(t, port)
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 32 && total(mb.node, "api", "k") == 32
	}, 20*time.Second, poll, "resynced after reconnect")
	// The other PoP's resync can converge both before ma's own reconnect
	// has been handled.
	require.Eventually(t, func() bool { return ma.rep.Status().Resyncs > resyncs }, 10*time.Second, poll, "ma resynced")
}

func TestParseSubject(t *testing.T) {
	iad, ams := identity.PoPID{Region: "us", PoP: "iad"}, identity.PoPID{Region: "eu", PoP: "ams"}
	for _, tc := range []struct {
		name, prefix, subject string
		kind                  Kind
		from, to              identity.PoPID
		ok                    bool
	}{
		{"delta", "", DeltaSubject("", iad), KindDelta, iad, identity.PoPID{}, true},
		{"heartbeat", "", HeartbeatSubject("", iad), KindHeartbeat, iad, identity.PoPID{}, true},
		{"sync", "", SyncSubject("", iad), KindSync, iad, identity.PoPID{}, true},
		{"region", "", RegionSubject("", iad), KindRegion, iad, identity.PoPID{}, true},
		{"region, too many tokens", "", "geolimit.region.us.iad.x", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"region, wildcard", "", "geolimit.region.us.*", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"state", "", StateSubject("", iad, ams), KindState, iad, ams, true},
		{"dotted prefix", "acme.rl", DeltaSubject("acme.rl", iad), KindDelta, iad, identity.PoPID{}, true},
		{"other prefix", "", "other.delta.us.iad", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"prefix only as a substring", "geo", "geolimit.delta.us.iad", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"unknown kind", "", "geolimit.bogus.us.iad", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"too few tokens", "", "geolimit.delta.us", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"too many tokens", "", "geolimit.delta.us.iad.x", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"empty token", "", "geolimit.delta..iad", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"state without recipient", "", "geolimit.state.us.iad", 0, identity.PoPID{}, identity.PoPID{}, false},
		{"state, empty recipient token", "", "geolimit.state.us.iad.eu.", 0, identity.PoPID{}, identity.PoPID{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, from, to, ok := ParseSubject(tc.prefix, tc.subject)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.kind, kind)
			assert.Equal(t, tc.from, from)
			assert.Equal(t, tc.to, to)
		})
	}
}

// TestNATSRestartLonePoP restarts the only node of a PoP: other PoPs relay
// the counts of its former incarnation back to it, so it does not undercount
// what it admitted before the restart.
func TestNATSRestartLonePoP(t *testing.T) {
	s, ctx, ma, mb := natsPair(t)
	b := mb.id
	mb2 := restartLonePoP(t, ma, mb, func() *member {
		return startMember(t, ctx, newNode(t, b.Region, b.PoP, "iad-1", testRules()), natsOpts(s.ClientURL(), b, "iad-1"))
	})
	assert.Zero(t, mb2.rep.Stats()[0].Forged)
}

// restartLonePoP counts 30 on a global key over ma and mb (a PoP of one
// node), restarts mb with restart, and checks that the new incarnation
// learns the former one's counts (relayed back by ma's PoP) and that its
// new counts reach ma. It returns the restarted member.
func restartLonePoP(t *testing.T, ma, mb *member, restart func() *member) *member {
	t.Helper()
	for i := range 30 {
		m := ma
		if i%3 == 0 {
			m = mb
		}
		_, err := m.node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 30 && total(mb.node, "api", "k") == 30
	}, 10*time.Second, poll, "counts replicated both ways")
	require.NoError(t, mb.rep.Close())
	mb2 := restart()
	require.Eventually(t, func() bool {
		return total(mb2.node, "api", "k") == 30
	}, 10*time.Second, poll, "the restarted node learns its former incarnation's counts")
	_, err := mb2.node.Decide(time.Now().UnixNano(), "api", "k", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return total(ma.node, "api", "k") == 31 }, 10*time.Second, poll, "its new counts visible")
	return mb2
}

// natsPair starts one real nats-server and one node in each of eu/ams and
// us/iad replicating over it; everything stops when the test ends.
func natsPair(t *testing.T) (*server.Server, context.Context, *member, *member) {
	t.Helper()
	s := startNATS(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "ams-1", testRules()), natsOpts(s.ClientURL(), a, "ams-1"))
	mb := startMember(t, ctx, newNode(t, b.Region, b.PoP, "iad-1", testRules()), natsOpts(s.ClientURL(), b, "iad-1"))
	return s, ctx, ma, mb
}
