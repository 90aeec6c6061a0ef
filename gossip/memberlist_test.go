package gossip

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// popNode starts a node of PoP id with memberlist (joining join) and NATS.
func popNode(t testing.TB, ctx context.Context, id identity.PoPID, name string, key []byte, natsURL string, join ...string) *member {
	t.Helper()
	var keys [][]byte
	if key != nil {
		keys = [][]byte{key}
	}
	return popNodeWith(t, ctx, id, name, MemberlistConfig{SecretKeys: keys}, natsURL, join...)
}

// popNodeWith is popNode with the memberlist settings of mc (keys, logger).
func popNodeWith(t testing.TB, ctx context.Context, id identity.PoPID, name string, mc MemberlistConfig, natsURL string, join ...string) *member {
	t.Helper()
	n := newNode(t, id.Region, id.PoP, name, testRules())
	o := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
	mc.Self, mc.Name, mc.Bind, mc.Join = id, fmt.Sprintf("%s#%d", name, n.Link().Self().Incarnation), "127.0.0.1:0", join
	mc.ProbeInterval = 200 * time.Millisecond
	o.PoP = MemberlistConnect(mc)
	if natsURL != "" {
		o.Global = NATSConnect(NATSConfig{Self: id, Name: name, URL: natsURL, ReconnectWait: 50 * time.Millisecond})
	}
	return startMember(t, ctx, n, o)
}

func mlAddr(m *member) string { return m.rep.popT.(*Memberlist).Addr() }

// natsTap records every entry published on any geolimit subject.
type natsTap struct {
	mu     sync.Mutex
	byRule map[string]int
}

func tapDeltas(t testing.TB, url string) *natsTap {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	tap := &natsTap{byRule: map[string]int{}}
	dec := wire.NewDecoder()
	_, err = nc.Subscribe("geolimit.>", func(m *nats.Msg) {
		var d wire.Delta
		tap.mu.Lock()
		defer tap.mu.Unlock()
		if dec.Decode(m.Data, &d) == nil {
			for _, e := range d.Entries {
				tap.byRule[e.Rule]++
			}
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return tap
}

func (tp *natsTap) count(rule string) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.byRule[rule]
}

// testKey is a 32-byte gossip key.
func testKey() []byte { return []byte("0123456789abcdef0123456789abcdef") }

// TestMemberlistPoP runs a PoP of three nodes on real memberlist (encrypted)
// next to another PoP on NATS: the pop-scope rule is shared by the three and
// never published on NATS; the global rule reaches the other PoP.
func TestMemberlistPoP(t *testing.T) {
	s := startNATS(t, nil)
	tap := tapDeltas(t, s.ClientURL())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := testKey()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	a := popNode(t, ctx, ams, "ams-1", key, s.ClientURL())
	b := popNode(t, ctx, ams, "ams-2", key, s.ClientURL(), mlAddr(a))
	c := popNode(t, ctx, ams, "ams-3", key, s.ClientURL(), mlAddr(a))
	iad := startMember(t, ctx, newNode(t, "us", "iad", "iad-1", testRules()), natsOpts(s.ClientURL(), identity.PoPID{Region: "us", PoP: "iad"}, "iad-1"))
	pop3 := []*member{a, b, c}
	require.Eventually(t, func() bool {
		for _, m := range pop3 {
			if len(m.rep.Members()) != 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "three members")
	for i := range 90 {
		m := pop3[i%3]
		for _, rule := range []string{"per-ip", "api"} {
			_, err := m.node.Decide(time.Now().UnixNano(), rule, "203.0.113.7", 1)
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool {
		for _, m := range pop3 {
			if total(m.node, "per-ip", "203.0.113.7") != 90 || total(m.node, "api", "203.0.113.7") != 90 {
				return false
			}
		}
		return total(iad.node, "api", "203.0.113.7") == 90
	}, 10*time.Second, poll, "pop rule shared inside the PoP, global rule everywhere")
	require.Eventually(t, func() bool { return tap.count("api") > 0 }, 10*time.Second, poll, "global entries seen on NATS")
	// The tap has seen the global rule's deltas, published after the pop
	// rule's in the same flushes: had pop entries been published, they
	// would have arrived by now.
	assert.Zero(t, tap.count("per-ip"), "pop-scope entries published on NATS")
	assert.Zero(t, total(iad.node, "per-ip", "203.0.113.7"))
	st := a.rep.Status()
	require.Len(t, st.Transports, 2)
	assert.Equal(t, "memberlist", st.Transports[0].Transport)
	assert.NotZero(t, st.Transports[0].MessagesReceived)
	assert.Len(t, st.Members, 2)
}

// TestMemberlistWrongKey: a node with another key does not join the PoP.
func TestMemberlistWrongKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	a := popNode(t, ctx, ams, "ams-1", testKey(), "")
	b := popNode(t, ctx, ams, "ams-2", []byte("fedcba9876543210"), "", mlAddr(a))
	assert.Empty(t, a.rep.Members())
	assert.Empty(t, b.rep.Members())
}

// TestRestartMidWindow kills one node of a PoP of three mid-window and
// starts it again with a new incarnation: the PoP's count never drops, the
// new node learns the live window at once (push/pull on join), and its new
// counts are visible everywhere, including in another PoP.
func TestRestartMidWindow(t *testing.T) {
	s := startNATS(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	a := popNode(t, ctx, ams, "ams-1", nil, s.ClientURL())
	b := popNode(t, ctx, ams, "ams-2", nil, s.ClientURL(), mlAddr(a))
	c := popNode(t, ctx, ams, "ams-3", nil, s.ClientURL(), mlAddr(a))
	iad := startMember(t, ctx, newNode(t, "us", "iad", "iad-1", testRules()), natsOpts(s.ClientURL(), identity.PoPID{Region: "us", PoP: "iad"}, "iad-1"))
	require.Eventually(t, func() bool { return len(c.rep.Members()) == 2 && len(a.rep.Members()) == 2 }, 10*time.Second, poll, "three members")
	decide := func(m *member, rule string, n int) {
		for range n {
			_, err := m.node.Decide(time.Now().UnixNano(), rule, "k", 1)
			require.NoError(t, err)
		}
	}
	for _, m := range []*member{a, b, c} {
		decide(m, "per-ip", 30)
		decide(m, "api", 30)
	}
	decide(iad, "api", 10)
	all := func(ms []*member, rule string, want uint64) func() bool {
		return func() bool {
			for _, m := range ms {
				if total(m.node, rule, "k") != want {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, all([]*member{a, b, c}, "per-ip", 90), 10*time.Second, poll, "before the kill")
	require.Eventually(t, all([]*member{a, b, c, iad}, "api", 100), 10*time.Second, poll, "before the kill (global)")

	require.NoError(t, c.rep.Close())
	c2 := popNode(t, ctx, ams, "ams-3", nil, s.ClientURL(), mlAddr(a), mlAddr(b))
	require.NotEqual(t, c.node.Link().Self().Incarnation, c2.node.Link().Self().Incarnation)
	// Push/pull on join: the restarted node knows the window before it
	// decides anything, with no undercount.
	assert.Equal(t, uint64(90), total(c2.node, "per-ip", "k"), "pop count after restart")
	assert.Equal(t, uint64(100), total(c2.node, "api", "k"), "global count after restart")
	for _, m := range []*member{a, b} {
		assert.Equal(t, uint64(90), total(m.node, "per-ip", "k"), "the PoP's count never drops")
	}
	decide(c2, "per-ip", 5)
	decide(c2, "api", 5)
	require.Eventually(t, all([]*member{a, b, c2}, "per-ip", 95), 10*time.Second, poll, "new incarnation's counts visible in the PoP")
	require.Eventually(t, all([]*member{a, b, c2, iad}, "api", 105), 10*time.Second, poll, "new incarnation's counts visible everywhere")
}

// TestMemberlistBigFlush: a flush too big for a few datagrams goes over TCP
// (memberlist's reliable send) and still arrives whole.
func TestMemberlistBigFlush(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	start := func(name string, join ...string) *member {
		n := newNode(t, ams.Region, ams.PoP, name, testRules())
		return startMember(t, ctx, n, Options{
			Settings: repl.Settings{FlushInterval: time.Hour, AntiEntropyInterval: time.Hour},
			PoP:      MemberlistConnect(MemberlistConfig{Self: ams, Name: name, Bind: "127.0.0.1:0", Join: join}),
		})
	}
	a := start("ams-1")
	b := start("ams-2", mlAddr(a))
	require.Eventually(t, func() bool { return len(a.rep.Members()) == 1 && len(b.rep.Members()) == 1 }, 10*time.Second, poll, "two members")
	keys := ipKeys(20_000)
	for _, k := range keys {
		_, err := a.node.Decide(time.Now().UnixNano(), "per-ip", k, 1)
		require.NoError(t, err)
	}
	before := a.rep.Stats()[0].MessagesSent // the epoch announced to the joiner
	a.rep.Flush()
	require.Eventually(t, func() bool {
		return b.node.Stats().KeysByRule["per-ip"] == len(keys)
	}, 20*time.Second, poll, "every key at the other node")
	for _, k := range keys[:100] {
		assert.Equal(t, uint64(1), total(b.node, "per-ip", k))
	}
	st := a.rep.Stats()[0]
	assert.LessOrEqual(t, st.MessagesSent-before, uint64(3), "sent as a few large messages, not as datagrams")
}

// TestMemberlistRejoin: a node whose join target is not up yet finds it
// later, even though the target itself joins nobody.
func TestMemberlistRejoin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	later := hostPort(freePort(t))
	start := func(name, bind string, join ...string) *member {
		n := newNode(t, ams.Region, ams.PoP, name, testRules())
		return startMember(t, ctx, n, Options{
			Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour},
			PoP:      MemberlistConnect(MemberlistConfig{Self: ams, Name: name, Bind: bind, Join: join, RejoinInterval: 20 * time.Millisecond}),
		})
	}
	a := start("ams-1", "127.0.0.1:0", later)
	assert.Empty(t, a.rep.Members())
	b := start("ams-2", later)
	require.Eventually(t, func() bool { return len(a.rep.Members()) == 1 && len(b.rep.Members()) == 1 }, 10*time.Second, poll, "a rejoined b")
	_, err := b.node.Decide(time.Now().UnixNano(), "per-ip", "k", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return total(a.node, "per-ip", "k") == 1 }, 10*time.Second, poll, "counts shared")
}
