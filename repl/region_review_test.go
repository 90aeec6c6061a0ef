package repl

import (
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"testing"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// regionEpochBeat returns a heartbeat of PoP p announcing region epoch e.
func regionEpochBeat(p identity.PoPID, at int64, e uint64) Message {
	hb := heartbeatFrom(p, at)
	hb.Delta.Entries = []crdt.Entry{{Rule: p.Region, Key: regionEpochKey, Count: e}}
	return hb
}

// A region aggregate of the own region relayed while it was a former
// epoch to this node stops counting once that epoch becomes the current
// one: the node holds the PoP totals it sums (as a PoP's aggregate of the
// epoch a node learns, pop.Node.SetEpoch).
func TestOwnRegionAggregateOfTheLearnedEpochDoesNotCount(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	c.Step(now, regionEpochBeat(euFra, now, 9))
	if _, e := c.RegionVoice(); e != 9 {
		t.Fatalf("region epoch %d, want 9", e)
	}
	// us/iad relays eu's totals under epoch 7, which it takes for a former
	// one: they sum eu/fra's 10.
	st := regionTotals(usIad, "eu", 7, now, "k", 10)
	st.Kind, st.Link, st.To = KindState, LinkGlobal, ams1.PoPID
	if r := c.Step(now, st); r.Forged || r.Applied.Merged != 1 {
		t.Fatalf("relayed eu#7: %+v, want merged (a former epoch)", r)
	}
	c.Step(now, countsFrom(euFra, now, "k", 10)) // eu/fra's PoP total
	if got := estimate(t, c, now, "k"); got != 20 {
		t.Fatalf("estimate %v, want 20 (eu#7 a former epoch beside fra's total)", got)
	}
	// eu's PoPs agree on the lower epoch 7: eu#7 is the own region's
	// current total, made of fra's 10 this node holds.
	c.Step(now, regionEpochBeat(euFra, now, 7))
	if _, e := c.RegionVoice(); e != 7 {
		t.Fatalf("region epoch %d, want 7", e)
	}
	if got := estimate(t, c, now, "k"); got != 10 {
		t.Fatalf("estimate %v, want 10: the own region's current aggregate counted on top of the PoP totals it sums", got)
	}
}

// When two region epochs meet (a voice that heard no other PoP of its
// region for two heartbeat intervals started one), the region's PoPs take
// the lower and its voice re-sends every region total under it. The other
// regions keep the higher epoch's totals beside the lower's until their
// windows pass: the same admits count twice there, an overcount (a
// stricter fleet) as when two epochs of one PoP meet; dropping the
// superseded epoch would undercount while both sides of a split region
// speak (docs/replication.md, "Known limits").
func TestRegionEpochsMeetingOvercountElsewhere(t *testing.T) {
	euAms := identity.PoPID{Region: "eu", PoP: "ams"}
	iad1 := identity.Replica{PoPID: usIad, Node: "i1", Incarnation: 1}
	c, now := regionCore(t, iad1, euAms, euFra)
	// eu/fra, not hearing eu/ams, spoke for eu under epoch 9.
	c.Step(now, regionEpochBeat(euFra, now, 9))
	c.Step(now, regionTotals(euFra, "eu", 9, now, "k", 10))
	// eu agrees on eu/ams's epoch 7; eu/ams, the voice, re-sends eu's
	// totals under it: the same 10 admits.
	c.Step(now, regionEpochBeat(euAms, now, 7))
	c.Step(now, regionEpochBeat(euFra, now, 7))
	c.Step(now, regionTotals(euAms, "eu", 7, now, "k", 10))
	if got := estimate(t, c, now, "k"); got != 20 {
		t.Fatalf("estimate %v, want 20: eu's totals under both epochs, never fewer than the 10 admitted", got)
	}
	// Once epoch 9's windows have passed, only epoch 7 counts.
	later := now + 2*int64(ruleWindow)
	c.Step(later, regionTotals(euAms, "eu", 7, later, "k", 4))
	if got := estimate(t, c, later, "k"); got != 4 {
		t.Fatalf("estimate %v two windows later, want 4", got)
	}
}

// The members of a PoP speak for their region under one region epoch. A
// node that restarts in a region whose other PoPs are gone (down, or
// removed) hears no other PoP of it: it must learn the region's epoch from
// its members (they announce it) rather than speak
// under one of its own, which the other regions would count beside the
// region's, and under which the speakers drop each other's forwards.
func TestMembersOfAVoiceAgreeOnTheRegionEpoch(t *testing.T) {
	// One key, decided on both members: whichever owns it, the other
	// forwards no region totals; and several.
	for _, keys := range [][]string{{"k0"}, {"k1"}, {"k2"}, {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}} {
		t.Run(strings.Join(keys, ","), func(t *testing.T) {
			s := DefaultSettings()
			s.RegionVoices = new(true)
			core := func(r identity.Replica) *Core {
				c, err := New(Config{Node: testNode(t, r).Link(), GlobalLink: true, PoPLink: true, Settings: s})
				require.NoError(t, err)
				return c
			}
			// Incarnations grow: the PoP's epoch (a1's) is above the region's.
			ams2 := identity.Replica{PoPID: ams1.PoPID, Node: "a2", Incarnation: 200}
			a1 := core(identity.Replica{PoPID: ams1.PoPID, Node: "a1", Incarnation: 100})
			now := t0
			a1.Tick(now)
			a1.Step(now, regionEpochBeat(euFra, now, 7)) // eu/fra, since gone
			a1.SetMembers(now, nil)
			a1.Ready()
			// step ticks the cores after a decision on each key, delivers
			// the PoP link, and returns the region epochs published.
			step := func(now int64, cs ...*Core) map[uint64]bool {
				var out [][]Message
				epochs := map[uint64]bool{}
				for _, c := range cs {
					for _, k := range keys {
						_, err := popNode(c).Decide(now, "api", k, 1)
						require.NoError(t, err)
					}
					c.Tick(now)
					out = append(out, c.Ready())
				}
				for i, ms := range out {
					for _, m := range ms {
						if m.Link == LinkRegion && m.Delta.Sender.IsRegion() {
							epochs[m.Delta.Sender.Incarnation] = true
						}
						if m.Link != LinkPoP {
							continue
						}
						for j, d := range cs {
							if j != i {
								d.Step(now, m)
							}
						}
					}
				}
				return epochs
			}
			for range 240 { // fra falls silent; ams speaks for eu under epoch 7
				now += int64(25 * time.Millisecond)
				step(now, a1)
			}
			a2 := core(ams2)
			a2.Tick(now)
			a1.SetMembers(now, []string{MemberName(ams2)})
			a2.SetMembers(now, []string{MemberName(a1.node.Self())})
			published := map[uint64]bool{}
			for range 240 {
				now += int64(25 * time.Millisecond)
				for e := range step(now, a1, a2) {
					published[e] = true
				}
			}
			v1, e1 := a1.RegionVoice()
			v2, e2 := a2.RegionVoice()
			require.True(t, v1 && v2, "both members speak for eu")
			require.Equal(t, uint64(7), e1)
			require.Equal(t, e1, e2, "a restarted member's region epoch")
			require.Equal(t, map[uint64]bool{7: true}, published, "region epochs published")
		})
	}
}

// Another region's former totals relayed before this node knows that
// region's epoch are dropped (which epoch is current is not known), and
// asked for again once it is: otherwise a node that restarts never counts
// what a region that restarted admitted before, until its windows pass.
func TestFormerRegionTotalsDroppedAreAskedAgain(t *testing.T) {
	iad1 := identity.Replica{PoPID: usIad, Node: "i1", Incarnation: 1}
	c, now := regionCore(t, iad1, euFra)
	for range 100 { // started and synced; eu/fra heard, eu's epoch not
		now += int64(100 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Tick(now)
		c.Ready()
	}
	require.NotZero(t, c.epoch)
	require.False(t, c.syncing)
	st := regionTotals(euFra, "eu", 3, now, "k", 10)
	st.Kind, st.Link, st.To = KindState, LinkGlobal, usIad
	if r := c.Step(now, st); !r.Dropped {
		t.Fatalf("eu#3 before eu's epoch is known: %+v, want dropped", r)
	}
	c.Step(now, Message{Link: LinkGlobal, Kind: KindState, From: euFra, To: usIad, Delta: &wire.Delta{
		Sender: identity.PoPReplica(usIad, c.epoch), SentAt: now, Epoch: c.epoch}}) // eu/fra's marker
	c.Ready()
	c.Step(now, regionEpochBeat(euFra, now, 5))
	asked := false
	for range 4 {
		now += int64(100 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Tick(now)
		for _, m := range c.Ready() {
			asked = asked || m.Kind == KindSync
		}
	}
	require.True(t, asked, "no sync request once eu's region epoch is known")
}

// A region's current totals come on the subject of relayed state only as
// its voice's answer to this PoP's sync request: from a PoP of that
// region they count; from a PoP of another region (no PoP relays a current
// epoch) they are forged, and count nothing.
func TestRegionAnswerFromItsRegionOnly(t *testing.T) {
	iad1 := identity.Replica{PoPID: usIad, Node: "i1", Incarnation: 1}
	jpTyo := identity.PoPID{Region: "jp", PoP: "tyo"}
	c, now := regionCore(t, iad1, euFra, jpTyo)
	for range 100 {
		now += int64(100 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Step(now, heartbeatFrom(jpTyo, now))
		c.Tick(now)
		c.Ready()
	}
	c.Step(now, regionEpochBeat(euFra, now, 5))
	require.Equal(t, uint64(5), c.regionEpochOf("eu"))

	forged := regionTotals(jpTyo, "eu", 5, now, "k", 10)
	forged.Kind, forged.Link, forged.To = KindState, LinkGlobal, usIad
	r := c.Step(now, forged)
	assert.True(t, r.Forged, "eu's current totals from jp/tyo: %+v", r)
	assert.Zero(t, r.Applied.Merged)

	st := regionTotals(euFra, "eu", 5, now, "k", 10)
	st.Kind, st.Link, st.To = KindState, LinkGlobal, usIad
	r = c.Step(now, st)
	assert.False(t, r.Forged)
	assert.Equal(t, 1, r.Applied.Merged, "eu's current totals from eu/fra, its answer")
}

// A node that restarts (no cold start) takes the PoPs it expects as live
// until its first check of the peers: eu/fra does not take eu's voice from
// eu/ams, first by name, before it hears it (it published eu's totals to
// every PoP from a view it was still gathering, and handed the voice back
// a moment later); once the check finds eu/ams silent, it speaks.
func TestRestartedNodeTakesNoVoiceBeforeItsFirstCheck(t *testing.T) {
	s := DefaultSettings()
	s.RegionVoices = new(true)
	s.ExpectedPoPs = []string{"eu/ams", "us/iad"}
	fra := identity.Replica{PoPID: euFra, Node: "f1", Incarnation: 7}
	c, err := New(Config{Node: testNode(t, fra).Link(), GlobalLink: true, Settings: s})
	require.NoError(t, err)
	now := t0
	c.Tick(now)
	var spoke bool
	for now < t0+int64(s.PeerTimeout)/2 {
		now += int64(10 * time.Millisecond)
		c.Step(now, heartbeatFrom(usIad, now))
		c.Tick(now)
		v, _ := c.RegionVoice()
		spoke = spoke || v
		c.Ready()
	}
	assert.False(t, spoke, "eu/fra took eu's voice before hearing eu/ams, first by name")
	for range 400 {
		now += int64(10 * time.Millisecond)
		c.Step(now, heartbeatFrom(usIad, now))
		c.Tick(now)
		c.Ready()
		if v, _ := c.RegionVoice(); v {
			return
		}
	}
	t.Fatal("eu/fra never took eu's voice with eu/ams silent")
}
