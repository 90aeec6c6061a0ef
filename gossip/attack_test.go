package gossip

// Attacks by a client on the NATS network that no credentials stop (the
// servers here have none: what credentials stop is tested in auth_test.go
// and with the example configuration in cmd/edge). Each test plays one
// attack against real nats-servers linked by gateways and checks the bound
// the node keeps.

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// attacker connects a plain NATS client to url.
func attacker(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// publish encodes d and publishes it on subj.
func publish(t *testing.T, nc *nats.Conn, subj string, d *wire.Delta) int {
	t.Helper()
	parts, err := wire.Encode(d, 1<<20)
	require.NoError(t, err)
	n := 0
	for _, p := range parts {
		require.NoError(t, nc.Publish(subj, p))
		n += len(p)
	}
	return n
}

// globalStats returns the counters of st's transport to other PoPs.
func globalStats(st Status) TransportStats {
	for _, t := range st.Transports {
		if t.Scope == "global" {
			return t
		}
	}
	return TransportStats{}
}

// A single delta claiming 2^62 requests from an invented incarnation of a
// real PoP, sent from another region: the count is clamped to the rule's
// limit and counted, so the key is locked no longer than a replica that
// spent the whole limit could lock it (two windows at most).
func TestAttackForgedHugeCount(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "login", Limit: 10, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal}}
	victim := startMember(t, ctx, newNode(t, "eu", "ams", "ams-1", rules), Options{
		Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour},
		Global:   NATSConnect(NATSConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "ams-1", URL: c.ClientURL(0)}),
	})
	nc := attacker(t, c.ClientURL(1))
	now := time.Now().UnixNano()
	win := int64(time.Minute)
	forged := &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 99), SentAt: now, Epoch: 99,
		Entries: []crdt.Entry{{Rule: "login", Key: "alice", Window: now / win, Count: 1 << 62}}}
	require.Eventually(t, func() bool {
		publish(t, nc, DeltaSubject("", identity.PoPID{Region: "us", PoP: "iad"}), forged)
		return victim.node.Stats().Applied.Clamped > 0
	}, 10*time.Second, poll, "the forged count arrives across the gateway")
	assert.EqualValues(t, 10, total(victim.node, "login", "alice"), "merged as the limit")
	d, err := victim.node.Peek(now, "login", "alice", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a replica that spent the limit denies the key")
	// Two windows after the window claimed, the key is free again.
	d, err = victim.node.Peek((now/win+2)*win, "login", "alice", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 9, d.Remaining)
}

// Heartbeats on the subjects of 500 invented PoPs, against a node that
// names the PoPs it expects and against one that names none (the default):
// none of them counts as partitioned (the share policy keeps the whole
// limit; without expected PoPs a silent PoP counts only once its counts
// were merged), at most MaxPoPs are tracked, and once silent for
// ForgetAfter they are gone from status too.
func TestAttackInventedPoPs(t *testing.T) {
	ams, iad := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	for _, tc := range []struct {
		name     string
		expected []string
		maxPoPs  int
	}{
		{"expected pops", popNames(ams, iad), 50},
		{"no expected pops", nil, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := gossiptest.StartSuperCluster(t, "eu", "us")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opts := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: 400 * time.Millisecond,
				ForgetAfter: 2 * time.Second, MaxPoPs: tc.maxPoPs, ExpectedPoPs: tc.expected}}
			start := func(id identity.PoPID, url string) *member {
				o := opts
				o.Global = NATSConnect(NATSConfig{Self: id, Name: id.PoP, URL: url})
				return startMember(t, ctx, newNode(t, id.Region, id.PoP, id.PoP+"-1", testRules()), o)
			}
			victim := start(ams, c.ClientURL(0))
			start(iad, c.ClientURL(1))
			require.Eventually(t, func() bool {
				rps := victim.rep.RemotePoPs()
				return len(rps) == 1 && rps[0].PoPID == iad && len(victim.rep.Partitioned()) == 0
			}, 10*time.Second, poll, "the real PoPs hear each other")

			nc := attacker(t, c.ClientURL(1))
			// The flood is sent again until the victim holds it all at
			// once: under load, taking 500 heartbeats in may outlast
			// ForgetAfter, and the first ones would be forgotten before
			// the last arrive. It is sent again only once the victim has
			// taken the last one in (500 more messages received, its queue
			// empty): floods piled up in its subscription would go on
			// refreshing the invented PoPs long after the last send.
			received := func() uint64 {
				var n uint64
				for _, ts := range victim.rep.Stats() {
					if ts.Scope == "global" {
						n += ts.MessagesReceived
					}
				}
				return n
			}
			var last uint64
			floods := 0
			require.Eventually(t, func() bool {
				if floods == 0 || (received() >= last+500 && victim.rep.Status().QueuedBytes == 0) {
					last = received()
					floods++
					now := time.Now().UnixNano()
					for i := range 500 {
						p := identity.PoPID{Region: "x", PoP: fmt.Sprintf("p%d", i)}
						publish(t, nc, HeartbeatSubject("", p), &wire.Delta{Sender: identity.Replica{PoPID: p, Node: "n", Incarnation: 1}, SentAt: now})
					}
					require.NoError(t, nc.Flush())
				}
				// Every invented PoP tracked, now or until it was
				// forgotten: under load (and -race) taking 500
				// heartbeats in may outlast ForgetAfter.
				heard := len(victim.rep.RemotePoPs()) + int(victim.rep.Status().Protocol.ForgottenPoPs)
				return heard >= min(tc.maxPoPs, 501)
			}, 30*time.Second, 250*time.Millisecond, "the invented PoPs are heard")
			t.Logf("%d floods of 500 heartbeats", floods)
			st := victim.rep.Status()
			assert.LessOrEqual(t, len(st.RemotePoPs), tc.maxPoPs, "at most MaxPoPs tracked")
			// Silent for longer than the peer timeout, they still partition nothing.
			// Wait until every invented PoP still known has been silent for
			// longer than the peer timeout, as the victim itself sees it.
			require.Eventually(t, func() bool {
				for _, rp := range victim.rep.RemotePoPs() {
					if rp.PoPID != iad && rp.Age <= 3*opts.PeerTimeout/2 {
						return false
					}
				}
				return true
			}, 10*time.Second, poll, "the invented PoPs silent past the peer timeout")
			assert.Empty(t, victim.rep.Partitioned())
			assert.False(t, victim.node.Partition(time.Now().UnixNano()).Partitioned, "no share limits")
			require.Eventually(t, func() bool {
				rps := victim.rep.RemotePoPs()
				return len(rps) == 1 && rps[0].PoPID == iad
			}, 10*time.Second, poll, "the invented PoPs are forgotten")
			assert.Positive(t, victim.rep.Status().Protocol.ForgottenPoPs)
		})
	}
}

// A flood of sync requests, from one node and from a thousand invented
// nodes, makes the node re-send its totals at most once per SyncInterval,
// however many ask, where each request used to cost one re-send per 50ms.
func TestAttackSyncAmplification(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	const syncInterval = time.Second
	victim := startMember(t, ctx, newNode(t, "eu", "ams", "ams-1", testRules()), Options{
		Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, SyncInterval: syncInterval},
		Global:   NATSConnect(NATSConfig{Self: ams, Name: "ams-1", URL: c.ClientURL(0)}),
	})
	now := time.Now().UnixNano()
	for i := range 2000 {
		_, err := victim.node.Decide(now, "api", fmt.Sprintf("k%d", i), 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return victim.node.Link().Pending() == 0 }, 10*time.Second, poll, "flushed")
	// The victim's subscriptions must be in place at its server (the
	// gateway forwards the attacker's messages to it).
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	gossiptest.WaitInterest(t, c.Servers[0], DeltaSubject("", iad), SyncSubject("", iad))
	nc := attacker(t, c.ClientURL(1))
	for _, tc := range []struct {
		name  string
		nodes int
	}{{"one node", 1}, {"a thousand nodes", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			time.Sleep(syncInterval) // a fresh pacing budget: a duration of the protocol, not a poll
			before := victim.rep.Status()
			begin := time.Now()
			var asked int
			for i := range 1000 {
				p := identity.PoPID{Region: "x", PoP: fmt.Sprintf("evil%d", i%tc.nodes%10)}
				asked += publish(t, nc, SyncSubject("", p), &wire.Delta{
					Sender: identity.Replica{PoPID: p, Node: fmt.Sprintf("n%d", i%tc.nodes), Incarnation: 1}, SentAt: time.Now().UnixNano()})
				if i%100 == 99 {
					time.Sleep(20 * time.Millisecond) // spread over ~200ms, each burst past the coalescing interval
				}
			}
			require.NoError(t, nc.Flush())
			require.Eventually(t, func() bool {
				p := victim.rep.Status().Protocol
				return p.SyncAnswers+p.SyncThrottled-before.Protocol.SyncAnswers-before.Protocol.SyncThrottled >= 10
			}, 10*time.Second, poll, "the requests are seen")
			time.Sleep(syncInterval) // deliberate: the re-send rate is sampled over this window too
			// A paced answer can go out late on a busy machine: wait for one.
			var after Status
			require.Eventually(t, func() bool {
				after = victim.rep.Status()
				return after.Protocol.AntiEntropies > before.Protocol.AntiEntropies
			}, 10*time.Second, poll, "requests are answered")
			elapsed := time.Since(begin)
			rounds := after.Protocol.AntiEntropies - before.Protocol.AntiEntropies
			bound := uint64(elapsed/syncInterval + 1)
			sent := globalStats(after).BytesSent - globalStats(before).BytesSent
			t.Logf("%d requests (%d B) over %s: %d re-sends, %d B sent", 1000, asked, elapsed.Round(time.Millisecond), rounds, sent)
			assert.LessOrEqual(t, rounds, bound, "once per SyncInterval, whoever asks")
		})
	}
}

// 32 MB of well-formed deltas, as fast as a client can publish them, into a
// node whose receive queue holds 1 MiB: the queue never holds more, what does
// not fit is dropped and counted, the store stays within its key bound, and
// the heap comes back once the flood has been applied.
func TestAttackBulkFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods 32 MB")
	}
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const queueBytes = 1 << 20
	n, err := pop.New(pop.Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: uint64(time.Now().UnixNano())},
		Rules: testRules(), MaxKeys: 20000})
	require.NoError(t, err)
	victim := startMember(t, ctx, n, Options{
		Settings:   repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour},
		QueueBytes: queueBytes,
		Global:     NATSConnect(NATSConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "ams-1", URL: c.ClientURL(0)}),
	})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	// The victim's subscriptions must be in place at its server (the
	// gateway forwards the attacker's messages to it).
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	gossiptest.WaitInterest(t, c.Servers[0], DeltaSubject("", iad), SyncSubject("", iad))
	nc := attacker(t, c.ClientURL(1))
	now := time.Now().UnixNano()
	win := now / int64(time.Hour)
	sent, seq := 0, 0
	for sent < 32<<20 {
		d := &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 7), SentAt: now, Epoch: 7}
		for range 2000 {
			seq++
			d.Entries = append(d.Entries, crdt.Entry{Rule: "api", Key: fmt.Sprintf("flood-%d", seq), Window: win, Count: 1})
		}
		sent += publish(t, nc, DeltaSubject("", identity.PoPID{Region: "us", PoP: "iad"}), d)
	}
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		st := victim.rep.Status()
		return globalStats(st).BytesReceived >= uint64(sent)/2 && st.QueuedBytes == 0
	}, 60*time.Second, poll, "the flood is received and the queue drained")
	// Everything not yet delivered by the server drains too.
	var last uint64
	require.Eventually(t, func() bool {
		st := victim.rep.Status()
		r := globalStats(st).BytesReceived
		done := r == last && st.QueuedBytes == 0
		last = r
		return done
	}, 60*time.Second, poll, "nothing more arrives")
	st := victim.rep.Status()
	t.Logf("flood %d MB: received %d MB, dropped %d messages, queue peak %d B, keys %d",
		sent>>20, globalStats(st).BytesReceived>>20, globalStats(st).Dropped, st.QueuedBytesPeak, victim.node.Stats().Store.Keys)
	assert.LessOrEqual(t, st.QueuedBytesPeak, int64(queueBytes))
	assert.Positive(t, globalStats(st).Dropped, "the flood overran the queue")
	assert.LessOrEqual(t, victim.node.Stats().Store.Keys, 20000, "max_keys")
	after := heap()
	t.Logf("heap: %d MB before, %d MB after", base>>20, after>>20)
	assert.Less(t, after, base+48<<20, "the flood's memory comes back (the store holds at most 20000 keys)")
}
