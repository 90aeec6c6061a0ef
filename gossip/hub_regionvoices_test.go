package gossip_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/memhub"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// TestHubRegionVoices runs three regions (two PoPs of two nodes in eu, one
// PoP in us and in ap) with region voices over a Hub that routes PoP totals
// to their region only and drops, duplicates, delays and reorders: every
// view reaches the exact total, other regions' counts held as their
// regions' totals. (gossip's TestRegionVoicesConverge runs the same on
// nats-servers linked by gateways.)
func TestHubRegionVoices(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	hub := memhub.New(seed)
	defer hub.Close()
	hub.SetRegionVoices(true)
	hub.SetFaults(memhub.Faults{Drop: 0.1, Duplicate: 0.1, MaxDelay: 5 * time.Millisecond})
	hub.SetPushPull(500 * time.Millisecond) // as memberlist repairs a PoP's lost messages (TestHubConvergence)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := gossip.Options{Settings: repl.Settings{FlushInterval: 5 * time.Millisecond, AntiEntropyInterval: 100 * time.Millisecond,
		PeerTimeout: 400 * time.Millisecond, RegionVoices: new(true)}}
	var ms []*member
	var foreign atomic.Int64 // PoP totals of another region handed to a node
	for _, p := range []struct {
		id    identity.PoPID
		nodes int
	}{{identity.PoPID{Region: "eu", PoP: "ams"}, 2}, {identity.PoPID{Region: "eu", PoP: "fra"}, 2}, {identity.PoPID{Region: "us", PoP: "iad"}, 1}, {identity.PoPID{Region: "ap", PoP: "sin"}, 1}} {
		for i := range p.nodes {
			name := fmt.Sprintf("%s-%d", p.id.PoP, i)
			o := opts
			if p.nodes > 1 {
				o.PoP = hub.PoP(p.id, name)
			}
			connect, self := hub.Global(p.id, name), p.id
			o.Global = func(h gossip.Handler) (gossip.Transport, error) {
				return connect(&regionTap{Handler: h, self: self, foreign: &foreign})
			}
			ms = append(ms, startMember(t, ctx, newNode(t, p.id.Region, p.id.PoP, name, testRules()), o))
		}
	}
	// Only a PoP whose counts were merged takes part in the election: each
	// node spends one request of a key of its own first.
	for _, m := range ms {
		_, err := m.node.Decide(time.Now().UnixNano(), "api", "voice-"+m.name, 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		for _, m := range ms {
			if st := m.rep.Status(); st.RegionEpoch == 0 || st.RegionVoice != (m.id.PoP != "fra") {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "one voice per region")
	rng := rand.New(rand.NewPCG(seed, 2))
	var admitted uint64
	for range 2000 {
		d, err := ms[rng.IntN(len(ms))].node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	require.Eventually(t, func() bool {
		for _, m := range ms {
			if total(m.node, "api", "k") != admitted {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "every view reaches the exact total %d", admitted)
	assert.Zero(t, foreign.Load(), "PoP totals of another region delivered")
	for _, m := range ms {
		v, err := m.node.View(time.Now().UnixNano(), "api", "k")
		require.NoError(t, err)
		for _, w := range v.Windows {
			for r := range w.Replicas {
				rep, err := identity.ParseReplica(r)
				require.NoError(t, err)
				assert.True(t, rep.Region == m.id.Region || rep.IsRegion(), "%s holds %s", m.name, r)
			}
		}
	}
}

// regionTap counts the PoP totals of another region a hub hands a node.
type regionTap struct {
	gossip.Handler
	self    identity.PoPID
	foreign *atomic.Int64
}

func (r *regionTap) Receive(from identity.PoPID, kind gossip.Kind, b []byte) {
	if kind == gossip.KindDelta && from.Region != r.self.Region {
		r.foreign.Add(1)
	}
	r.Handler.Receive(from, kind, b)
}
