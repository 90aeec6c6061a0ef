package repl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// modeFleet is three nodes: a1 and a2 in eu/ams, b1 in us/iad. Messages go
// through the wire format.
type modeFleet struct {
	t     *testing.T
	cores map[string]*Core
	nodes map[string]*pop.Node
}

func newModeFleet(t *testing.T) *modeFleet { return newModeFleetWith(t, DefaultSettings()) }

func newModeFleetWith(t *testing.T, s Settings) *modeFleet {
	f := &modeFleet{t: t, cores: map[string]*Core{}, nodes: map[string]*pop.Node{}}
	reps := map[string]identity.Replica{
		"a1": ams1,
		"a2": {PoPID: ams1.PoPID, Node: "a2", Incarnation: 1},
		"b1": {PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "b1", Incarnation: 1},
	}
	for name, r := range reps {
		n := testNode(t, r)
		c, err := New(Config{Settings: s, Node: n.Link(), PoPLink: r.PoP == "ams", GlobalLink: true})
		require.NoError(t, err)
		f.cores[name], f.nodes[name] = c, n
	}
	f.cores["a1"].SetMembers(t0, []string{MemberName(reps["a2"])})
	f.cores["a2"].SetMembers(t0, []string{MemberName(reps["a1"])})
	return f
}

// deliver hands msgs from node from to the nodes they reach, encoded and
// decoded, except to the nodes in skip.
func (f *modeFleet) deliver(now int64, from string, msgs []Message, skip ...string) {
	self := f.nodes[from].Link().Self()
	for _, m := range msgs {
		bs, err := wire.Encode(m.Delta, 0)
		require.NoError(f.t, err)
		for name, c := range f.cores {
			r := f.nodes[name].Link().Self()
			if name == from || (m.Link == LinkPoP) != r.SamePoP(self) || (m.Link == LinkGlobal && r.SamePoP(self)) || contains(skip, name) {
				continue
			}
			for _, b := range bs {
				d, err := wire.Decode(b)
				require.NoError(f.t, err)
				c.Step(now, Message{Link: m.Link, Kind: m.Kind, From: self.PoPID, Delta: d})
			}
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func modeMessages(msgs []Message) (out []Message) {
	for _, m := range msgs {
		if modes.Section.Len(m.Delta) > 0 {
			out = append(out, m)
		}
	}
	return out
}

func effective(t *testing.T, n *pop.Node, rule string) pop.Mode {
	t.Helper()
	st, ok := n.RuleMode(rule)
	require.True(t, ok)
	return st.Effective
}

// TestModeSentAtOnce: a mode set on a node goes out at its next Tick, to
// its PoP's members and to the other PoPs, whatever the flush schedule.
func TestModeSentAtOnce(t *testing.T) {
	f := newModeFleet(t)
	for name, c := range f.cores {
		c.Tick(t0)
		f.deliver(t0, name, c.Ready())
	}
	now := t0 + int64(time.Millisecond)
	_, err := f.nodes["a1"].SetRuleMode(now, "api", modes.Off)
	require.NoError(t, err)
	f.cores["a1"].Tick(now)
	msgs := modeMessages(f.cores["a1"].Ready())
	require.Len(t, msgs, 2, "one to the PoP, one to the other PoPs")
	assert.Equal(t, LinkPoP, msgs[0].Link)
	assert.Equal(t, LinkGlobal, msgs[1].Link)
	f.deliver(now, "a1", msgs)
	for _, name := range []string{"a1", "a2", "b1"} {
		assert.Equal(t, pop.Off, effective(t, f.nodes[name], "api"), name)
	}
	assert.Equal(t, uint64(2), f.cores["a1"].Stats().ModesSent)
	assert.Equal(t, uint64(1), f.cores["b1"].Stats().ModesReceived)
	f.cores["a1"].Tick(now + 1)
	assert.Empty(t, modeMessages(f.cores["a1"].Ready()), "sent once")
}

// With region voices a PoP's totals reach only its region, but a rule's
// mode still reaches every PoP: it goes on the region link.
func TestModeCrossesRegionsWithRegionVoices(t *testing.T) {
	s := DefaultSettings()
	s.RegionVoices = new(true)
	f := newModeFleetWith(t, s)
	for _, c := range f.cores {
		c.Tick(t0)
		c.Ready()
	}
	now := t0 + int64(time.Millisecond)
	_, err := f.nodes["a1"].SetRuleMode(now, "api", modes.Off)
	require.NoError(t, err)
	f.cores["a1"].Tick(now)
	msgs := modeMessages(f.cores["a1"].Ready())
	require.Len(t, msgs, 2)
	assert.Equal(t, LinkRegion, msgs[1].Link)
	f.deliver(now, "a1", msgs)
	assert.Equal(t, pop.Off, effective(t, f.nodes["b1"], "api"))
}

// TestModeAntiEntropyRepairs: a node that missed a mode learns it with the
// next anti-entropy round, and a joining member with the PoP's state.
func TestModeAntiEntropyRepairs(t *testing.T) {
	f := newModeFleet(t)
	for _, c := range f.cores {
		c.Tick(t0)
		c.Ready()
	}
	_, err := f.nodes["a1"].SetRuleMode(t0, "ip", modes.Shadow)
	require.NoError(t, err)
	f.cores["a1"].Tick(t0)
	f.deliver(t0, "a1", f.cores["a1"].Ready(), "a2", "b1") // lost
	assert.Equal(t, pop.Enforce, effective(t, f.nodes["b1"], "ip"))

	end := t0 + int64(DefaultSettings().AntiEntropyInterval) + int64(time.Second)
	for now := t0; now < end; now += int64(10 * time.Millisecond) {
		f.cores["a1"].Tick(now)
		f.deliver(now, "a1", f.cores["a1"].Ready())
	}
	assert.Equal(t, pop.Shadow, effective(t, f.nodes["a2"], "ip"))
	assert.Equal(t, pop.Shadow, effective(t, f.nodes["b1"], "ip"))

	// A new member merges the PoP's state (memberlist push/pull).
	a3 := testNode(t, identity.Replica{PoPID: ams1.PoPID, Node: "a3", Incarnation: 1})
	c3, err := New(Config{Settings: DefaultSettings(), Node: a3.Link(), PoPLink: true, GlobalLink: true})
	require.NoError(t, err)
	for _, d := range f.cores["a2"].LocalState(end) {
		bs, err := wire.Encode(&d, 0)
		require.NoError(t, err)
		for _, b := range bs {
			dd, err := wire.Decode(b)
			require.NoError(t, err)
			c3.MergeState(end, dd)
		}
	}
	assert.Equal(t, pop.Shadow, effective(t, a3, "ip"))
}

// TestModeForgedRefused: a mode message between PoPs must come through its
// sender's PoP; one inside the PoP must name a member.
func TestModeForgedRefused(t *testing.T) {
	n := &scriptNode{self: ams1}
	c, err := New(Config{Settings: DefaultSettings(), Node: n, PoPLink: true, GlobalLink: true})
	require.NoError(t, err)
	iad, fra := identity.PoPID{Region: "us", PoP: "iad"}, identity.PoPID{Region: "eu", PoP: "fra"}
	w := []modes.RuleMode{{Rule: "api", Mode: modes.Off, At: t0, By: identity.Replica{PoPID: iad, Node: "b1", Incarnation: 1}}}
	for name, m := range map[string]Message{
		"another pop's subject": {Link: LinkGlobal, Kind: KindDelta, From: fra, Delta: modes.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: iad, Node: "b1", Incarnation: 1}}, w...)},
		"own pop over nats":     {Link: LinkGlobal, Kind: KindDelta, From: ams1.PoPID, Delta: modes.Section.With(&wire.Delta{Sender: ams1}, w...)},
		"as a heartbeat":        {Link: LinkGlobal, Kind: KindHeartbeat, From: iad, Delta: modes.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: iad, Node: "b1", Incarnation: 1}}, w...)},
		"stranger in the pop":   {Link: LinkPoP, Kind: KindDelta, From: ams1.PoPID, Delta: modes.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: iad, Node: "b1", Incarnation: 1}}, w...)},
	} {
		res := c.Step(t0, m)
		assert.True(t, res.Forged, name)
	}
	assert.Empty(t, n.merged)
	// Relayed: any PoP may pass on a write made elsewhere.
	res := c.Step(t0, Message{Link: LinkGlobal, Kind: KindDelta, From: fra, Delta: modes.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: fra, Node: "f1", Incarnation: 1}}, w...)})
	assert.False(t, res.Forged)
	assert.Equal(t, w, n.merged)
}
