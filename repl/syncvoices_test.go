package repl

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// With region voices a sync request reaches the PoPs of its sender's
// region and, of every other region, the PoP that speaks for it. These
// tests hold the parts of the protocol that depend on it.

var (
	usSjc = identity.PoPID{Region: "us", PoP: "sjc"}
	apSin = identity.PoPID{Region: "ap", PoP: "sin"}
)

// regionBeatFrom is a heartbeat turn of p's region, sent by p at at.
func regionBeatFrom(p identity.PoPID, at int64) Message {
	return Message{Link: LinkRegion, Kind: KindDelta, From: p,
		Delta: &wire.Delta{Sender: identity.Replica{PoPID: p, Node: "x", Incarnation: 1}, SentAt: at}}
}

// A marker from one PoP of another region answers the startup sync for
// every PoP of that region with region voices (they hold its totals alike,
// and only its voice hears the request); without, each PoP answers for
// itself. A PoP of the own region always answers for itself.
func TestVoicesMarkerAnswersForItsRegion(t *testing.T) {
	for _, voices := range []bool{true, false} {
		t.Run(map[bool]string{true: "voices", false: "no-voices"}[voices], func(t *testing.T) {
			s := DefaultSettings()
			s.RegionVoices = new(voices)
			s.StartupSync = 5 * time.Second
			s.ExpectedPoPs = popNames(euFra, usIad, usSjc, apSin)
			c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Relay: true, Settings: s})
			require.NoError(t, err)
			now := t0
			c.Tick(now)
			if c.epoch == 0 {
				c.setEpoch(now, ams1.Incarnation)
			}
			epoch := c.epoch
			c.Step(now, Message{Link: LinkGlobal, Kind: KindState, From: usIad, To: ams1.PoPID,
				Delta: &wire.Delta{Sender: identity.PoPReplica(ams1.PoPID, epoch), SentAt: now, Epoch: epoch}})
			want := []identity.PoPID{apSin, euFra, usSjc}
			if voices {
				want = []identity.PoPID{apSin, euFra}
			}
			assert.Equal(t, want, c.unanswered())
		})
	}
}

// With region voices the first PoP heard of another region is asked
// through its region's voice ("region/*"), not every PoP of the fleet: at a
// cold start every node hears every PoP first, and asking every PoP each
// time had each node of a 1 000-PoP fleet receive thousands of requests a
// second. Another PoP of that region heard first later, once the region's
// stream reaches this node, asks nothing: the stream carries its totals.
func TestFirstHeardOtherRegionAsksItsVoice(t *testing.T) {
	c, now := regionCore(t, ams1, euFra)
	now += int64(time.Second)
	c.Tick(now)
	c.Ready()
	// syncScopes returns the scopes of the sync requests c sends within
	// 100ms (nil: none).
	syncScopes := func() [][]string {
		var out [][]string
		for range 10 {
			now += int64(10 * time.Millisecond)
			c.Tick(now)
			for _, m := range c.Ready() {
				if m.Kind != KindSync {
					continue
				}
				scopes := []string{}
				for _, e := range m.Delta.Entries {
					if e.Rule == controlRule && strings.HasPrefix(e.Key, syncScopeKey) {
						scopes = append(scopes, e.Key[len(syncScopeKey):])
					}
				}
				out = append(out, scopes)
			}
		}
		return out
	}
	c.Step(now, regionBeatFrom(usIad, now))
	require.Equal(t, [][]string{{"us/*"}}, syncScopes(), "one request, naming us's voice (none names every PoP)")
	c.Step(now, regionBeatFrom(usSjc, now))
	assert.Empty(t, syncScopes(), "us's stream already reaches this node")
}

// With region voices the PoPs of another region that this node has no
// latency of yet take the first one sampled of their region (they reach
// it through its stream), not a heartbeat interval, in the near-limit
// allowance's view of the fleet; a PoP of the own region, or without
// region voices, still takes a heartbeat interval.
func TestRegionLagBeforeItsPoPsAreSampled(t *testing.T) {
	for _, voices := range []bool{true, false} {
		t.Run(map[bool]string{true: "voices", false: "no-voices"}[voices], func(t *testing.T) {
			s := DefaultSettings()
			s.RegionVoices = new(voices)
			s.ExpectedPoPs = popNames(euFra, usIad, usSjc)
			c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: s})
			require.NoError(t, err)
			now := t0
			c.Tick(now)
			const age = 80 * time.Millisecond
			c.Step(now, regionBeatFrom(usIad, now-int64(age)))
			hb := int64(c.cfg.HeartbeatInterval)
			assert.Equal(t, hb, c.lagOf(c.peers.get(euFra)), "a PoP of the own region")
			if voices {
				assert.Equal(t, int64(age), c.lagOf(c.peers.get(usSjc)))
			} else {
				assert.Equal(t, hb, c.lagOf(c.peers.get(usSjc)))
			}
		})
	}
}

// With region voices a PoP of another region is heard through its region's
// heartbeat turns, which list the PoPs their sender hears. Where the whole
// fleet starts at once, the turns that list them come after a node's first
// check of the peers: a PoP of a region whose stream already reaches the
// node, but none of whose turns listed a PoP yet, is not taken for cut off
// at that check (one interval more). Once a turn of its region listed
// others and not it, or when nothing of its region arrived at all, it is.
func TestAwaitedPoPsOfAnotherRegion(t *testing.T) {
	usLax := identity.PoPID{Region: "us", PoP: "lax"}
	for _, tc := range []struct {
		name   string
		beat   *Message // a turn of us before the first check, or none
		listed bool     // it lists sjc
		want   []identity.PoPID
	}{
		{name: "stream, nothing listed", beat: &Message{}, want: nil},
		{name: "stream, sjc listed", beat: &Message{}, listed: true, want: []identity.PoPID{usLax}},
		{name: "nothing of us", want: []identity.PoPID{usIad, usLax, usSjc}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			s.RegionVoices = new(true)
			s.ExpectedPoPs = popNames(euFra, usIad, usSjc, usLax)
			c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: s})
			require.NoError(t, err)
			now := t0
			c.Tick(now)
			hb := int64(c.cfg.HeartbeatInterval)
			for end := now + 2*hb + hb/2; now < end; now += int64(10 * time.Millisecond) {
				c.Step(now, heartbeatFrom(euFra, now))
				if tc.beat != nil {
					m := regionBeatFrom(usIad, now)
					if tc.listed {
						m.Delta.Entries = append(m.Delta.Entries, crdt.Entry{Rule: controlRule, Key: liveKeyPrefix + usSjc.String(), Count: 1})
					}
					c.Step(now, m)
				}
				c.Tick(now)
				c.Ready()
			}
			part, ver := c.Partitioned()
			require.NotZero(t, ver, "the peers were checked")
			assert.Equal(t, tc.want, part)
		})
	}
}
