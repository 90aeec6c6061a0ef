package repl

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// Three PoPs, one of them 4s ahead and one 100ms behind: every node agrees
// on the lower median of the clocks (ams's here); the heartbeats take 1ms
// both ways (the offsets the PoPs tell each other cancel it; a change
// within correctionStep is not followed). The clock
// 100ms off alone is within minCorrection.
func TestFleetClockAgreed(t *testing.T) {
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	ids := []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}}
	skews := []int64{0, -int64(100 * time.Millisecond), int64(4 * time.Second)}
	var ns []*snode
	for i, id := range ids {
		ns = append(ns, driftCore(t, identity.Replica{PoPID: id, Node: "n", Incarnation: uint64(i + 1)}, rules))
	}
	now := t0
	for range 200 {
		now += int64(10 * time.Millisecond)
		for i, n := range ns {
			n.c.Tick(now + skews[i])
		}
		for i, n := range ns {
			for _, m := range n.c.Ready() {
				if m.Link != LinkGlobal {
					continue
				}
				m.From = n.id
				for j, o := range ns {
					if j != i {
						o.c.Step(now+skews[j]+int64(time.Millisecond), m)
					}
				}
			}
		}
	}
	// The fleet clock: each node's clock plus its correction.
	for i, n := range ns {
		fleet := skews[i] + int64(n.c.ClockCorrection())
		if i == 0 && n.c.ClockCorrection() != 0 {
			t.Errorf("ams corrects by %s; it is the median clock", n.c.ClockCorrection())
		}
		if i == 2 && (fleet < -int64(2*time.Millisecond) || fleet > int64(2*time.Millisecond)) {
			t.Errorf("iad's fleet clock is %s off ams's, want within 2ms (correction %s)", time.Duration(fleet), n.c.ClockCorrection())
		}
	}
	if c := ns[1].c.ClockCorrection(); c != 0 {
		t.Errorf("fra corrects by %s; its median offset (100ms) is within minCorrection", c)
	}
}

// A PoP that claims an absurd clock and an absurd estimate of ours moves the
// correction by at most maxCorrection, and nothing wraps.
func TestFleetClockBounded(t *testing.T) {
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	a := driftCore(t, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}, rules)
	liar := identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}
	now := t0
	for i := range 10 {
		now += int64(100 * time.Millisecond)
		a.c.Tick(now)
		sent := int64(1) // far in the past
		if i == 0 {
			sent = math.MaxInt64 // far ahead
		}
		a.c.Step(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: liar.PoPID, Delta: &wire.Delta{
			Sender: liar, SentAt: sent, Epoch: 1,
			Entries: []crdt.Entry{{Rule: "eu/ams", Key: offsetKey, Window: math.MaxInt64}}}})
		if c := a.c.ClockCorrection(); c < -time.Duration(maxCorrection) || c > time.Duration(maxCorrection) {
			t.Fatalf("correction %s beyond %s", c, time.Duration(maxCorrection))
		}
	}
	if c := a.c.ClockCorrection(); c != -time.Duration(maxCorrection) {
		t.Fatalf("correction %s, want the bound -%s", c, time.Duration(maxCorrection))
	}
}

// fleetCores starts one core per PoP of ids, each expecting the others, at
// t0 on its own clock (t0 + skews[i]), and returns them with the hello
// heartbeat each sent at its start.
func fleetCores(t *testing.T, ids []identity.PoPID, skews []int64) ([]*snode, []Message) {
	t.Helper()
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	var ns []*snode
	var hellos []Message
	for i, id := range ids {
		var expected []string
		for _, o := range ids {
			if o != id {
				expected = append(expected, o.String())
			}
		}
		n, err := pop.New(pop.Config{Self: identity.Replica{PoPID: id, Node: "n", Incarnation: uint64(i + 1)}, Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{Node: n.Link(), GlobalLink: true, Relay: true, Settings: Settings{FlushInterval: 10 * time.Millisecond,
			AntiEntropyInterval: time.Hour, PeerTimeout: time.Second, ExpectedPoPs: expected}})
		if err != nil {
			t.Fatal(err)
		}
		c.Tick(t0 + skews[i])
		var hello *Message
		for _, m := range c.Ready() {
			if m.Kind == KindHeartbeat {
				m.From = id
				hello = &m
			}
		}
		if hello == nil {
			t.Fatalf("%s sent no heartbeat at its start", id)
		}
		ns = append(ns, &snode{c: c, id: id})
		hellos = append(hellos, *hello)
	}
	return ns, hellos
}

// A fleet that starts together, us 4s ahead of eu, each PoP expecting the
// others: a node takes a correction as soon as the heartbeats it has heard
// settle the median whatever the clocks of the PoPs it has not heard yet
// (here, at the first heartbeat of each PoP), and none before. A node of
// fra that has heard only the two us PoPs would otherwise step 4s ahead
// for as long as ams stays unheard, and count in windows nobody else
// reaches yet.
func TestFleetClockFirstRound(t *testing.T) {
	ids := []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}, {Region: "us", PoP: "ord"}}
	skew := int64(4 * time.Second)
	skews := []int64{0, 0, skew, skew}
	ns, hellos := fleetCores(t, ids, skews)
	lat := int64(time.Millisecond)
	hear := func(to, from int) time.Duration {
		ns[to].c.Step(t0+skews[to]+lat, hellos[from])
		return ns[to].c.ClockCorrection()
	}
	const ams, fra, iad, ord = 0, 1, 2, 3
	// fra hears us first: ams may be anywhere, so the median is open.
	assert.Zero(t, hear(fra, iad), "fra, having heard iad only")
	assert.Zero(t, hear(fra, ord), "fra, having heard iad and ord; ams unheard")
	assert.Zero(t, hear(fra, ams), "fra, the median of its PoP and ams")
	// iad hears ord (its own clock), then ams: still open until fra.
	assert.Zero(t, hear(iad, ord))
	assert.Zero(t, hear(iad, ams), "iad, fra unheard")
	c := hear(iad, fra)
	fleet := skews[iad] + int64(c)
	assert.InDelta(t, 0, fleet, float64(2*lat), "iad's fleet clock after its first round: %s off ams's (correction %s)", time.Duration(fleet), c)
	// ord hears eu first: settled at the second eu PoP.
	assert.Zero(t, hear(ord, ams))
	c = hear(ord, fra)
	assert.InDelta(t, 0, skews[ord]+int64(c), float64(2*lat), "ord after eu's first heartbeats (correction %s)", c)
	assert.Zero(t, hear(ams, iad))
	assert.Zero(t, hear(ams, ord))
	assert.Zero(t, hear(ams, fra))
}

// An expected PoP that stays unheard holds a node's correction only for a
// peer timeout after its start: then it is left out, as a silent PoP is.
func TestFleetClockUnheardLeftOut(t *testing.T) {
	ids := []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}, {Region: "us", PoP: "ord"}}
	skew := int64(4 * time.Second)
	ns, hellos := fleetCores(t, ids, []int64{0, 0, skew, skew})
	iad := ns[2].c
	iad.Step(t0+skew+int64(time.Millisecond), hellos[0])
	require.Zero(t, iad.ClockCorrection(), "ams heard, fra and ord unheard")
	// ams again, past the peer timeout: fra and ord are left out, and the
	// lower median of iad's PoP and ams is ams's clock.
	hb := hellos[0]
	d := *hb.Delta
	d.SentAt += int64(1100 * time.Millisecond)
	hb.Delta = &d
	iad.Step(t0+skew+int64(1101*time.Millisecond), hb)
	c := iad.ClockCorrection()
	assert.InDelta(t, -skew, int64(c), float64(2*time.Millisecond), "correction %s", c)
}

// One PoP that lies (a clock an hour ahead, an absurd estimate of ours) and
// one whose first heartbeat came 900ms late move the correction of a node
// whose fleet agrees not at all, at any point: the median passes over
// them, and the bounds keep holding.
func TestFleetClockSingleOutlier(t *testing.T) {
	ids := []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}, {Region: "us", PoP: "ord"}}
	ns, hellos := fleetCores(t, ids, []int64{0, 0, 0, 0})
	a := ns[0].c
	liar := identity.Replica{PoPID: ids[3], Node: "x", Incarnation: 9}
	now := t0
	for i := range 20 {
		now += int64(100 * time.Millisecond)
		a.Tick(now)
		a.Ready()
		a.Step(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: ids[3], Delta: &wire.Delta{
			Sender: liar, SentAt: now + int64(time.Hour), Epoch: 9,
			Entries: []crdt.Entry{{Rule: "eu/ams", Key: offsetKey, Window: math.MinInt64}}}})
		assert.Zero(t, a.ClockCorrection(), "after the liar's heartbeat %d", i)
		if i == 0 {
			a.Step(now+int64(900*time.Millisecond), hellos[2]) // iad's first, 900ms late
			assert.Zero(t, a.ClockCorrection(), "after iad's late first heartbeat")
		}
		hb := hellos[1] // fra, on time
		d := *hb.Delta
		d.SentAt = now - int64(time.Millisecond)
		hb.Delta = &d
		a.Step(now, hb)
		assert.Zero(t, a.ClockCorrection(), "after fra's heartbeat %d", i)
	}
}

// A corrected node dates every message it sends on its own clock, as its
// heartbeats are: counts it decided on the fleet clock too. Receivers take
// a message's age net of the sender's offset, so a delta dated on the fleet
// clock looked as old as the correction (4s, clamped to the peer timeout).
func TestFleetClockMessagesOnOwnClock(t *testing.T) {
	ids := []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}, {Region: "us", PoP: "ord"}}
	skew := int64(4 * time.Second)
	skews := []int64{0, 0, skew, skew}
	ns, hellos := fleetCores(t, ids, skews)
	iad := ns[2].c
	now := t0 + skew + int64(time.Millisecond)
	for _, from := range []int{0, 1, 3} {
		iad.Step(now, hellos[from])
	}
	require.NotZero(t, iad.ClockCorrection())
	iad.Ready()
	var sent int
	for range 10 {
		now += int64(10 * time.Millisecond)
		_, err := popNode(iad).Decide(now+int64(iad.ClockCorrection()), "api", "k", 1)
		require.NoError(t, err)
		iad.Tick(now)
		for _, m := range iad.Ready() {
			if m.Kind == KindDelta && m.Delta != nil && len(m.Delta.Entries) > 0 {
				sent++
				assert.Equal(t, now, m.Delta.SentAt, "a %s delta's SentAt is %s off the node's clock", m.Link, time.Duration(m.Delta.SentAt-now))
			}
		}
	}
	assert.NotZero(t, sent, "the counts went out")
}
