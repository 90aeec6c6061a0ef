package gossip

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// The kill switch on open links (no NATS credentials): an attacker
// re-sends "off" for a rule every 100 ms, dated 1.9 s ahead (inside the
// tolerated skew), on the operator PoP's own subject and in its name,
// unsigned and signed by a key of its own. With a mode authority the
// operator's change (signed) reaches the other region within a second and
// holds there while the attack goes on; every forged write is refused.
func TestModeAuthorityHoldsOnOpenLinks(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seed := func(b byte) ed25519.PrivateKey {
		s := make([]byte, ed25519.SeedSize)
		for i := range s {
			s[i] = b
		}
		return ed25519.NewKeyFromSeed(s)
	}
	opKey, rogue := seed(7), modes.NewAuthority(nil, seed(8))
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal}}
	settings := repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour}
	ams, iad := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	operator := startMember(t, ctx, gossiptest.NewNodeConfig(t, pop.Config{Self: identity.Replica{PoPID: ams, Node: "ams-1"}, Rules: rules,
		ModeAuthority: modes.NewAuthority(nil, opKey)}), Options{Settings: settings,
		Global: NATSConnect(NATSConfig{Self: ams, Name: "ams-1", URL: c.ClientURL(0)})})
	victim := startMember(t, ctx, gossiptest.NewNodeConfig(t, pop.Config{Self: identity.Replica{PoPID: iad, Node: "iad-1"}, Rules: rules,
		ModeAuthority: modes.NewAuthority([]ed25519.PublicKey{opKey.Public().(ed25519.PublicKey)}, nil)}), Options{Settings: settings,
		Global: NATSConnect(NATSConfig{Self: iad, Name: "iad-1", URL: c.ClientURL(1)})})
	require.Eventually(t, func() bool {
		for _, p := range victim.rep.Status().RemotePoPs {
			if p.PoPID == ams && !p.Partitioned {
				return true
			}
		}
		return false
	}, 10*time.Second, poll, "iad hears ams")

	nc := attacker(t, c.ClientURL(1))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the attack: every 100 ms until stopped
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			now := time.Now().UnixNano()
			pin := modes.RuleMode{Rule: "api", Mode: modes.Off, At: now + int64(1900*time.Millisecond), By: operator.node.Link().Self()}
			signed := pin
			rogue.Sign(&signed)
			d := *modes.Section.With(&wire.Delta{Sender: operator.node.Link().Self(), SentAt: now}, []modes.RuleMode{pin, signed}...)
			msgs, err := wire.Encode(&d, 0)
			if err == nil {
				_ = nc.Publish(DeltaSubject("", ams), msgs[0])
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-done }()
	require.Eventually(t, func() bool { return victim.node.Stats().Modes.Untrusted >= 4 }, 10*time.Second, poll, "the forged writes arrive")

	start := time.Now()
	_, err := operator.node.SetRuleMode(time.Now().UnixNano(), "api", modes.Shadow)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, _ := victim.node.RuleMode("api")
		return st.Effective == pop.Shadow
	}, time.Second, time.Millisecond, "the operator's change reaches the other region within a second")
	t.Logf("operator's change at the other region after %v", time.Since(start).Round(time.Millisecond))
	// It holds while ten more rounds of the attack arrive.
	held := victim.node.Stats().Modes.Untrusted
	require.Eventually(t, func() bool { return victim.node.Stats().Modes.Untrusted >= held+20 }, 10*time.Second, poll)
	st, _ := victim.node.RuleMode("api")
	assert.Equal(t, pop.Shadow, st.Effective, "the forged re-sends never win")
	assert.Equal(t, operator.node.Link().Self(), st.Set.By)
	assert.Zero(t, victim.node.Stats().Modes.Future, "dated inside the skew: refused for their signature, not their date")
}
