package repl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/wire"
)

// regionCore returns a started Core of node r (alone in its PoP) with
// region voices on, that has heard the PoPs heard.
func regionCore(t *testing.T, r identity.Replica, heard ...identity.PoPID) (*Core, int64) {
	t.Helper()
	s := DefaultSettings()
	s.RegionVoices = new(true)
	c, err := New(Config{Node: testNode(t, r).Link(), GlobalLink: true, Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.Tick(now)
	for _, p := range heard {
		c.Step(now, heartbeatFrom(p, now))
	}
	c.Ready()
	return c, now
}

// regionTotals returns a region's totals published by PoP from: key's
// count n under region epoch epoch.
func regionTotals(from identity.PoPID, region string, epoch uint64, at int64, key string, n uint64) Message {
	return Message{Link: LinkRegion, Kind: KindDelta, From: from, Delta: &wire.Delta{
		Sender: identity.RegionReplica(region, epoch), SentAt: at, Epoch: epoch,
		Entries: []crdt.Entry{{Rule: "api", Key: key, Window: at / int64(ruleWindow), Count: n}}}}
}

func estimate(t *testing.T, c *Core, now int64, key string) float64 {
	t.Helper()
	v, err := popNode(c).View(now, "api", key)
	if err != nil {
		t.Fatal(err)
	}
	return v.Estimate
}

var (
	euFra = identity.PoPID{Region: "eu", PoP: "fra"}
	euAaa = identity.PoPID{Region: "eu", PoP: "aaa"}
	usIad = identity.PoPID{Region: "us", PoP: "iad"}
)

// The voice is the region's first PoP by name among those heard that can
// speak for it: ams speaks while it hears only fra, and stops once aaa is
// heard publishing counts; it speaks again once aaa has been silent for
// PeerTimeout.
func TestRegionVoiceIsTheFirstPoPHeard(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	now += int64(3 * time.Second) // past PeerTimeout: the region epoch starts
	for range 8 {
		now += int64(500 * time.Millisecond)
		c.Tick(now)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Step(now, heartbeatFrom(usIad, now))
	}
	if v, e := c.RegionVoice(); !v || e != ams1.Incarnation {
		t.Fatalf("voice %v epoch %d, want true and the PoP's epoch %d", v, e, ams1.Incarnation)
	}
	for range 4 {
		now += int64(500 * time.Millisecond)
		c.Step(now, heartbeatFrom(euAaa, now))
		c.Step(now, countsFrom(euAaa, now, "k", 1)) // it publishes counts: it can speak for eu
		c.Step(now, heartbeatFrom(euFra, now))
		c.Tick(now)
	}
	if v, _ := c.RegionVoice(); v {
		t.Fatal("still the voice while eu/aaa, first by name, is heard")
	}
	for range 8 {
		now += int64(500 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Tick(now)
	}
	if v, _ := c.RegionVoice(); !v {
		t.Fatal("not the voice again after eu/aaa went silent")
	}
}

// A region epoch another PoP of the region announces in its heartbeats is
// taken when it is lower, and announced on.
func TestRegionEpochIsLearnedFromHeartbeats(t *testing.T) {
	c, now := regionCore(t, ams1, euFra)
	hb := heartbeatFrom(euAaa, now)
	hb.Delta.Entries = []crdt.Entry{{Rule: "eu", Key: regionEpochKey, Count: 7}}
	c.Step(now, hb)
	if _, e := c.RegionVoice(); e != 7 {
		t.Fatalf("region epoch %d, want 7 (learned)", e)
	}
	hb.Delta.Entries[0].Count = 9 // higher: kept at 7
	c.Step(now, hb)
	other := heartbeatFrom(usIad, now) // another region's epoch is not ours
	other.Delta.Entries = []crdt.Entry{{Rule: "us", Key: regionEpochKey, Count: 3}}
	c.Step(now, other)
	if _, e := c.RegionVoice(); e != 7 {
		t.Fatalf("region epoch %d, want 7", e)
	}
	var sent uint64
	for range 4 {
		now += int64(500 * time.Millisecond)
		c.Tick(now)
		for _, m := range c.Ready() {
			if m.Kind == KindHeartbeat {
				for _, e := range m.Delta.Entries {
					if e.Key == regionEpochKey && e.Rule == "eu" {
						sent = e.Count
					}
				}
			}
		}
	}
	if sent != 7 {
		t.Fatalf("heartbeat announces region epoch %d, want 7", sent)
	}
}

// Another region's totals count once, under its aggregate; the own
// region's are not counted (the node holds the PoP totals they sum); a
// PoP cannot speak for another region, nor send a PoP's replica as a
// region's.
func TestRegionTotalsAreTakenOnlyFromTheirRegion(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	if r := c.Step(now, regionTotals(usIad, "us", 5, now, "k", 40)); r.Forged || r.Applied.Merged != 1 {
		t.Fatalf("us totals from us/iad: %+v, want merged", r)
	}
	if got := estimate(t, c, now, "k"); got != 40 {
		t.Fatalf("estimate %v, want 40", got)
	}
	// Repeated, or lower: one aggregate, maximum-merged.
	c.Step(now, regionTotals(usIad, "us", 5, now, "k", 30))
	if got := estimate(t, c, now, "k"); got != 40 {
		t.Fatalf("estimate %v after a lower total, want 40", got)
	}
	for _, m := range []Message{
		regionTotals(usIad, "eu", 5, now, "k", 500), // us/iad speaking for eu
		{Link: LinkRegion, Kind: KindDelta, From: usIad, Delta: &wire.Delta{ // a PoP's replica on the region link
			Sender: identity.PoPReplica(usIad, 5), SentAt: now, Epoch: 5,
			Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: now / int64(ruleWindow), Count: 500}}}},
		regionTotals(usIad, "us", 0, now, "k", 500), // no epoch
	} {
		if r := c.Step(now, m); !r.Forged || r.Applied.Merged != 0 {
			t.Errorf("sender %v from %v: %+v, want forged", m.Delta.Sender, m.From, r)
		}
	}
	// The own region's totals teach the epoch, and count nothing.
	if r := c.Step(now, regionTotals(euFra, "eu", 4, now, "k", 900)); r.Forged || r.Applied.Merged != 0 {
		t.Fatalf("eu totals from eu/fra: %+v, want taken for the epoch only", r)
	}
	if got := estimate(t, c, now, "k"); got != 40 {
		t.Fatalf("estimate %v after the own region's totals, want 40", got)
	}
	if _, e := c.RegionVoice(); e != 4 {
		t.Fatalf("region epoch %d, want 4 from eu/fra's totals", e)
	}
}

// The voice publishes the region total of a key: its own count plus the
// totals of the region's other PoPs, not other regions', as one message.
func TestVoicePublishesRegionTotals(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	now += int64(3 * time.Second)
	c.Tick(now)
	c.Ready()
	if v, e := c.RegionVoice(); !v || e == 0 {
		t.Fatalf("voice %v epoch %d, want the voice with an epoch", v, e)
	}
	n := popNode(c)
	n.Decide(now, "api", "k", 3)
	c.Step(now, countsFrom(euFra, now, "k", 10))             // eu/fra's PoP total
	c.Step(now, regionTotals(usIad, "us", 5, now, "k", 100)) // us's region total
	now += int64(100 * time.Millisecond)
	c.Tick(now)
	var region []Message
	for _, m := range c.Ready() {
		if m.Link == LinkRegion && m.Kind == KindDelta { // not the region's heartbeat turns
			region = append(region, m)
		}
	}
	if len(region) != 1 || len(region[0].Delta.Entries) != 1 {
		t.Fatalf("region messages %+v, want one with one entry", region)
	}
	d := region[0].Delta
	if d.Sender != identity.RegionReplica("eu", ams1.Incarnation) || d.Entries[0].Count != 13 {
		t.Fatalf("published %v count %d, want eu/*/*#%d count 13", d.Sender, d.Entries[0].Count, ams1.Incarnation)
	}
}

// A region whose every PoP is unheard counts as unheard ("region/*"), so
// the share policy freezes its aggregate; one PoP of it heard keeps it.
func TestUnheardRegions(t *testing.T) {
	usSfo := identity.PoPID{Region: "us", PoP: "sfo"}
	c, _ := regionCore(t, ams1)
	c.peers.add(usIad, &peer{down: true})
	c.peers.add(usSfo, &peer{down: true})
	got := c.unheardRegions([]identity.PoPID{usIad, usSfo}, []string{"us/iad", "us/sfo"})
	if want := []string{"us/iad", "us/sfo", "us/*"}; !equalStrings(got, want) {
		t.Fatalf("unheard %v, want %v", got, want)
	}
	c.peers.get(usSfo).down = false
	got = c.unheardRegions([]identity.PoPID{usIad}, []string{"us/iad"})
	if want := []string{"us/iad"}; !equalStrings(got, want) {
		t.Fatalf("unheard %v, want %v", got, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// With region voices a PoP's penalty blocks go to every PoP on the region
// link (its totals reach only its region), and a node takes another
// region's PoP's blocks from there; counts on that link from a PoP's
// replica are refused.
func TestRegionVoicesCarryBlocks(t *testing.T) {
	n, err := pop.New(pop.Config{Self: ams1, Rules: []pop.Rule{
		{Name: "api", Limit: 10, Window: ruleWindow, Cost: 1, Scope: pop.ScopeGlobal, BlockFor: time.Minute},
	}})
	require.NoError(t, err)
	s := DefaultSettings()
	s.RegionVoices = new(true)
	c, err := New(Config{Node: n.Link(), GlobalLink: true, Settings: s})
	require.NoError(t, err)
	now := t0
	c.Tick(now)
	c.Ready()
	until := now + int64(time.Minute)

	blk := *blocks.Section.With(&wire.Delta{Sender: identity.PoPReplica(usIad, 3), SentAt: now, Epoch: 3}, []blocks.Block{{Rule: "api", Key: "bad", Until: until}}...)
	if r := c.Step(now, Message{Link: LinkRegion, Kind: KindDelta, From: usIad, Delta: &blk}); r.Forged || r.Applied.Blocks.Merged != 1 {
		t.Fatalf("us/iad's blocks: %+v", r)
	}
	require.Equal(t, until, n.BlockedUntil(now, "api", "bad"))

	// This node's own block goes out on both links.
	for range 12 { // the 11th is refused and blocks the key
		_, err = n.Decide(now, "api", "me", 1)
		require.NoError(t, err)
	}
	require.NotZero(t, n.BlockedUntil(now, "api", "me"))
	now += int64(100 * time.Millisecond)
	c.Tick(now)
	links := map[Link]bool{}
	for _, m := range c.Ready() {
		if blocks.Section.Len(m.Delta) > 0 {
			links[m.Link] = true
		}
	}
	assert.Equal(t, map[Link]bool{LinkGlobal: true, LinkRegion: true}, links)

	counts := countsFrom(usIad, now, "k", 5)
	counts.Link = LinkRegion
	if r := c.Step(now, counts); !r.Forged {
		t.Fatalf("a PoP's counts on the region link: %+v, want forged", r)
	}
}

// An invented PoP of the region, first by name, that only heartbeats (on
// open links anyone can) does not silence the voice: only a PoP that can
// speak for the region takes part in the election, one whose counts were
// merged or, with ExpectedPoPs, one listed there. The voice's region
// totals keep going out.
func TestInventedPoPDoesNotSilenceTheVoice(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	beats := func(n int, extra ...Message) {
		for range n {
			now += int64(500 * time.Millisecond)
			c.Tick(now)
			c.Step(now, heartbeatFrom(euFra, now))
			c.Step(now, heartbeatFrom(usIad, now))
			for _, m := range extra {
				m.Delta.SentAt = now
				c.Step(now, m)
			}
			c.Ready()
		}
	}
	beats(14)
	require.True(t, func() bool { v, _ := c.RegionVoice(); return v }(), "the voice")
	// 50 heartbeats over 25 s from eu/aaa, which never publishes a count.
	for range 50 {
		beats(1, heartbeatFrom(euAaa, now))
		if v, _ := c.RegionVoice(); !v {
			t.Fatal("an invented PoP's heartbeats silenced the voice")
		}
	}
	// Its region totals still go out (a key near its limit: sent at once).
	_, err := popNode(c).Decide(now, "api", "k", 890)
	require.NoError(t, err)
	c.Step(now, countsFrom(euFra, now, "k", 10))
	now += int64(100 * time.Millisecond)
	c.Tick(now)
	sent := false
	out := c.Ready()
	for _, m := range out {
		if m.Link == LinkRegion && m.Kind == KindDelta && len(m.Delta.Entries) == 1 && m.Delta.Entries[0].Count == 900 {
			sent = true
		}
	}
	assert.True(t, sent, "the voice publishes the region's totals: %+v", out)

	// With ExpectedPoPs, a PoP not listed takes no part even with counts.
	s := DefaultSettings()
	s.RegionVoices = new(true)
	s.ExpectedPoPs = popNames(euFra, usIad)
	c2, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: s})
	require.NoError(t, err)
	now2 := t0
	c2.Tick(now2)
	for range 20 {
		now2 += int64(500 * time.Millisecond)
		c2.Tick(now2)
		for _, m := range []Message{heartbeatFrom(euFra, now2), heartbeatFrom(usIad, now2), heartbeatFrom(euAaa, now2), countsFrom(euAaa, now2, "x", 1)} {
			c2.Step(now2, m)
		}
		c2.Ready()
	}
	v, _ := c2.RegionVoice()
	assert.True(t, v, "eu/aaa is not expected: it takes no part")
}
