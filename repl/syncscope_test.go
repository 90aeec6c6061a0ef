package repl

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// scopedSync is a sync request from PoP p that names the PoPs (or
// regions' voices, "region/*") asked.
func scopedSync(p identity.PoPID, at int64, asked ...string) Message {
	m := syncFrom(p, "x", at)
	for _, a := range asked {
		m.Delta.Entries = append(m.Delta.Entries, crdt.Entry{Rule: controlRule, Key: syncScopeKey + a, Count: 1})
	}
	return m
}

// regionVoiceWithCounts returns the Core of ams1, eu's voice (it hears
// fra of its region and iad of us), holding a count of key k, past its
// first anti-entropy round.
func regionVoiceWithCounts(t *testing.T) (*Core, int64) {
	t.Helper()
	c, now := regionCore(t, ams1, euFra, usIad)
	_, err := popNode(c).Decide(now, "api", "k", 1)
	require.NoError(t, err)
	for range 16 {
		now += int64(500 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Step(now, heartbeatFrom(usIad, now))
		c.Tick(now)
	}
	v, e := c.RegionVoice()
	require.True(t, v)
	require.NotZero(t, e)
	c.Ready()
	return c, now
}

// answer steps msgs into c and returns what c sends within 300ms: re-sends
// of its PoP totals, of its region totals to every PoP, and of its region
// totals to one PoP (to, by PoP).
func answer(c *Core, now int64, msgs ...Message) (pop, region int, to map[string]int) {
	for _, m := range msgs {
		c.Step(now, m)
	}
	to = map[string]int{}
	for range 30 {
		now += int64(10 * time.Millisecond)
		c.Tick(now)
		for _, o := range c.Ready() {
			switch {
			case o.Kind == KindDelta && o.Link == LinkGlobal && o.Reliable && len(o.Delta.Entries) > 0:
				pop++
			case o.Kind == KindDelta && o.Link == LinkRegion && len(o.Delta.Entries) > 0:
				region++
			case o.Kind == KindState && o.Delta.Sender.IsRegion() && len(o.Delta.Entries) > 0:
				to[o.To.String()]++
			}
		}
	}
	return pop, region, to
}

// A sync request that names PoPs is answered by those only, with what
// each sends the requester: a PoP of the region its PoP totals, another
// region its region's totals through the voice, to the requester alone. A
// request that names no one is answered with everything that reaches the
// requester, as for a node of an older version: its own region's PoPs'
// totals (its region totals sum them, and are not sent), or another
// region's totals (that region's PoP totals reach that region only, and
// are not sent).
func TestScopedSyncRequests(t *testing.T) {
	cases := []struct {
		name             string
		req              func(now int64) Message
		pop, region, iad int
	}{
		{"names no one", func(now int64) Message { return syncFrom(euFra, "x", now) }, 1, 0, 0},
		{"names no one, from another region", func(now int64) Message { return syncFrom(usIad, "x", now) }, 0, 0, 1},
		{"names this PoP", func(now int64) Message { return scopedSync(euFra, now, "eu/ams") }, 1, 0, 0},
		{"names this region's voice", func(now int64) Message { return scopedSync(usIad, now, "eu/*") }, 0, 0, 1},
		{"names both", func(now int64) Message { return scopedSync(usIad, now, "eu/*", "eu/ams") }, 1, 0, 1},
		{"names another PoP", func(now int64) Message { return scopedSync(euFra, now, "eu/zzz") }, 0, 0, 0},
		{"names another region", func(now int64) Message { return scopedSync(euFra, now, "us/*") }, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, now := regionVoiceWithCounts(t)
			pop, region, to := answer(c, now, tc.req(now))
			assert.Equal(t, tc.pop, pop, "re-sends of the PoP totals")
			assert.Equal(t, tc.region, region, "re-sends of the region totals to every PoP")
			assert.Equal(t, tc.iad, to["us/iad"], "region totals sent to us/iad alone")
		})
	}
}

// Many PoPs of other regions asking at once (a fleet starting together)
// get the region totals published once to every PoP, not one message
// each.
func TestRegionAnswersManyAtOnce(t *testing.T) {
	for _, n := range []int{minRegionTo, minRegionTo + 1} {
		c, now := regionVoiceWithCounts(t)
		var msgs []Message
		for i := range n {
			p := identity.PoPID{Region: "us", PoP: fmt.Sprintf("p%d", i)}
			c.Step(now, heartbeatFrom(p, now))
			msgs = append(msgs, syncFrom(p, "x", now))
		}
		// What hearing them first makes the voice send goes out first.
		for range 20 {
			now += int64(10 * time.Millisecond)
			c.Tick(now)
		}
		c.Ready()
		_, region, to := answer(c, now, msgs...)
		if n <= minRegionTo {
			assert.Equal(t, 0, region, "%d asked: no publish to every PoP", n)
			assert.Len(t, to, n, "%d asked: one answer each", n)
			continue
		}
		assert.Equal(t, 1, region, "%d asked: one publish to every PoP", n)
		assert.Empty(t, to, "%d asked: the publish answers every one", n)
	}
}

// A PoP that is not its region's voice does not answer a request that
// names the region's voice.
func TestScopedSyncNotTheVoice(t *testing.T) {
	c, now := regionCore(t, identity.Replica{PoPID: euFra, Node: "f1", Incarnation: 1}, euAaa, usIad)
	for range 8 {
		now += int64(500 * time.Millisecond)
		c.Step(now, heartbeatFrom(euAaa, now))
		c.Step(now, countsFrom(euAaa, now, "k", 1)) // aaa can speak for eu
		c.Step(now, heartbeatFrom(usIad, now))
		c.Tick(now)
	}
	v, _ := c.RegionVoice()
	require.False(t, v)
	_, err := popNode(c).Decide(now, "api", "k", 1)
	require.NoError(t, err)
	c.Ready()
	pop, region, to := answer(c, now, scopedSync(usIad, now, "eu/*"))
	assert.Zero(t, pop+region+len(to))
}

// syncScopes returns the scopes named by the sync requests among msgs
// ("all" for a request that names no one).
func syncScopes(msgs []Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Kind != KindSync {
			continue
		}
		var names []string
		for _, e := range m.Delta.Entries {
			if e.Rule == controlRule && strings.HasPrefix(e.Key, syncScopeKey) {
				names = append(names, e.Key[len(syncScopeKey):])
			}
		}
		if len(names) == 0 {
			names = []string{"all"}
		}
		out = append(out, strings.Join(names, ","))
	}
	return out
}

// A heartbeat gap asks only the PoP whose beats went missing (its region's
// voice, for a PoP of another region with region voices), and the node
// re-sends what it sends that PoP: its PoP totals to its region's PoP, its
// region totals (as the voice) to every PoP for another region's (every PoP
// of that region missed them).
func TestHeartbeatGapAsksOnlyWhoWasMissed(t *testing.T) {
	c, now := regionVoiceWithCounts(t)
	c.nextAE = now + int64(time.Hour) // no anti-entropy round in the way
	gap := now + int64(2*time.Second) // four beats lost, under PeerTimeout
	var got []string
	resent, region, to := 0, 0, 0
	for _, p := range []identity.PoPID{euFra, usIad} {
		c.Step(gap, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: p,
			Delta: &wire.Delta{Sender: identity.Replica{PoPID: p, Node: "x", Incarnation: 1}, SentAt: gap}})
	}
	for range 10 {
		gap += int64(10 * time.Millisecond)
		c.Tick(gap)
		out := c.Ready()
		got = append(got, syncScopes(out)...)
		resent += resends(out)
		for _, m := range out {
			if m.Link == LinkRegion && m.Kind == KindDelta && len(m.Delta.Entries) > 0 {
				region++
			}
			if m.Kind == KindState && m.To == usIad && m.Delta.Sender.IsRegion() && len(m.Delta.Entries) > 0 {
				to++
			}
		}
	}
	assert.Equal(t, []string{"eu/fra,us/*"}, got)
	assert.Equal(t, 1, resent, "re-sends of the PoP totals")
	assert.Equal(t, 1, region, "re-sends of the region totals to every PoP")
	assert.Equal(t, 0, to, "the region totals sent to us/iad alone")
}

// With region voices, a PoP of another region heard again after a silence
// (a restart, a healed cut) is asked alone, through its region's voice,
// not every PoP.
func TestHeardAgainAskedAlone(t *testing.T) {
	c, now := regionVoiceWithCounts(t)
	silence := now + int64(c.cfg.PeerTimeout) + int64(time.Second)
	for now < silence { // us/iad silent; eu/fra goes on
		now += int64(100 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Tick(now)
		c.Ready()
	}
	var msgs []Message
	c.Step(now, heartbeatFrom(usIad, now))
	for range 50 {
		now += int64(10 * time.Millisecond)
		c.Tick(now)
		msgs = append(msgs, c.Ready()...)
	}
	assert.Equal(t, []string{"us/*"}, syncScopes(msgs), "the sync requests sent")
}
