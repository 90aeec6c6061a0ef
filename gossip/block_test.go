package gossip

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// TestPenaltyBoxAcrossRegions runs two regions linked by a gateway: PoP ams
// of two nodes (memberlist inside) in eu, PoP iad of one in us. A key each
// ams node puts in the penalty box of a global rule is denied in the other
// region within a flush interval plus the gateway's round trip, and by the
// other ams node; a pop-scope block stays in ams.
func TestPenaltyBoxAcrossRegions(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{
		{Name: "login", Limit: 2, Window: time.Hour, Cost: 1, Scope: pop.ScopeGlobal, BlockFor: 10 * time.Minute},
		{Name: "otp", Limit: 2, Window: time.Hour, Cost: 1, Scope: pop.ScopePoP, BlockFor: 10 * time.Minute},
	}
	const flush = 50 * time.Millisecond
	opts := func(region, popName, name string, server int) Options {
		id := identity.PoPID{Region: region, PoP: popName}
		return Options{
			Settings: repl.Settings{FlushInterval: flush, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second, ExpectedPoPs: []string{"eu/ams", "us/iad"}},
			Global:   NATSConnect(NATSConfig{Self: id, Name: name, URL: c.Servers[server].ClientURL(), ReconnectWait: 50 * time.Millisecond}),
		}
	}
	var ams []*member
	var join []string
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("ams-%d", i)
		n := newNode(t, "eu", "ams", name, rules)
		o := opts("eu", "ams", name, 0)
		o.PoP = MemberlistConnect(MemberlistConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: fmt.Sprintf("%s#%d", name, n.Link().Self().Incarnation),
			Bind: "127.0.0.1:0", Join: join, ProbeInterval: 200 * time.Millisecond})
		m := startMember(t, ctx, n, o)
		join = append(join, m.rep.popT.(*Memberlist).Addr())
		ams = append(ams, m)
	}
	iadNode := newNode(t, "us", "iad", "iad-1", rules)
	iad := startMember(t, ctx, iadNode, opts("us", "iad", "iad-1", 1))
	require.Eventually(t, func() bool {
		for _, m := range ams {
			st := m.rep.Status()
			if len(m.rep.Members()) != 1 || st.Epoch == 0 || st.Epoch != ams[0].rep.Status().Epoch || len(m.rep.Partitioned()) != 0 {
				return false
			}
		}
		return len(iad.rep.Partitioned()) == 0
	}, 20*time.Second, poll, "ams shares an epoch and both PoPs hear each other")
	rtt := measureRTT(t, c)

	start := time.Now()
	for i, m := range ams {
		key := fmt.Sprintf("user-%d", i)
		for _, rule := range []string{"login", "otp"} {
			// Denied by the third request at the latest (the near-limit
			// allowance may deny sooner): then blocked.
			for j := 0; j < 3; j++ {
				d, err := m.node.Decide(time.Now().UnixNano(), rule, key, 1)
				require.NoError(t, err)
				if !d.Allowed {
					require.True(t, d.Blocked, "%s %s", m.name, rule)
					break
				}
			}
			require.NotZero(t, m.node.BlockedUntil(time.Now().UnixNano(), rule, key), "%s %s", m.name, rule)
		}
	}
	blockedEverywhere := func() bool {
		now := time.Now().UnixNano()
		for i := range ams {
			key := fmt.Sprintf("user-%d", i)
			if iad.node.BlockedUntil(now, "login", key) == 0 {
				return false
			}
			for _, m := range ams {
				if m.node.BlockedUntil(now, "login", key) == 0 || m.node.BlockedUntil(now, "otp", key) == 0 {
					return false
				}
			}
		}
		return true
	}
	require.Eventually(t, blockedEverywhere, 10*time.Second, poll, "blocks reach the other node and the other region")
	t.Logf("blocked everywhere %s after they were set (flush interval %s + gateway RTT %s)",
		time.Since(start).Round(time.Millisecond), flush, rtt.Round(time.Microsecond))

	for i := range ams {
		key := fmt.Sprintf("user-%d", i)
		d, err := iad.node.Decide(time.Now().UnixNano(), "login", key, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "iad never counted %s, yet denies it", key)
		assert.True(t, d.Blocked)
		assert.Greater(t, d.RetryAfter, 9*time.Minute)
		assert.Zero(t, iad.node.BlockedUntil(time.Now().UnixNano(), "otp", key), "a pop-scope block stays in its PoP")
		d, err = iad.node.Decide(time.Now().UnixNano(), "otp", key, 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
	}
	for _, m := range append(ams, iad) {
		for _, st := range m.rep.Stats() {
			assert.Zero(t, st.DecodeErrors, "%s %s", m.name, st.Transport)
			assert.Zero(t, st.Rejected, "%s %s", m.name, st.Transport)
		}
		assert.Zero(t, m.node.Stats().Applied.Blocks.Clamped, m.name)
	}
}
