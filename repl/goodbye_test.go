package repl

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// downNode records what the Core tells the node of unheard and down PoPs.
type downNode struct {
	Node
	unheard, down []string
	// pops is what SetPoPs said before the last SetUnheard.
	pops, popsNow []string
}

func (n *downNode) SetPoPs(pops []string) { n.popsNow = pops; n.Node.SetPoPs(pops) }

func (n *downNode) SetUnheard(now int64, pops []string) {
	n.unheard, n.pops = pops, n.popsNow
	n.Node.SetUnheard(now, pops)
}
func (n *downNode) SetDown(now int64, pops []string) { n.down = pops; n.Node.SetDown(now, pops) }

// goodbyeFrom returns the goodbye of node x of PoP p (epoch 1) sent at at
// through the subject of PoP via, leaving left members behind.
func goodbyeFrom(p, via identity.PoPID, at int64, left uint64) Message {
	return Message{Link: LinkGlobal, Kind: KindHeartbeat, From: via, Delta: &wire.Delta{
		Sender: identity.Replica{PoPID: p, Node: "x", Incarnation: 1}, SentAt: at, Epoch: 1,
		Entries: []crdt.Entry{{Rule: controlRule, Key: goodbyeKey, Count: left}}}}
}

// goodbyeCore returns a Core that hears the PoPs ids, each with counts.
func goodbyeCore(t *testing.T, ids []identity.PoPID) (*Core, *downNode, int64) {
	t.Helper()
	n := &downNode{Node: testNode(t, ams1).Link()}
	c, err := New(Config{Node: n, GlobalLink: true, Settings: Settings{PeerTimeout: 2 * time.Second}})
	require.NoError(t, err)
	now := t0
	c.Tick(now)
	for _, p := range ids {
		c.Step(now, countsFrom(p, now, "k", 3))
		c.Step(now, heartbeatFrom(p, now))
	}
	now += int64(250 * time.Millisecond)
	c.Tick(now)
	part, _ := c.Partitioned()
	require.Empty(t, part)
	return c, n, now
}

// A PoP whose last member says goodbye is taken for down at once, not cut
// off; its next message brings it back. A late message it sent before the
// goodbye does not.
func TestGoodbyeTakesThePoPDown(t *testing.T) {
	ids := popIDs(2)
	c, n, now := goodbyeCore(t, ids)
	res := c.Step(now, goodbyeFrom(ids[0], ids[0], now, 0))
	assert.False(t, res.Forged)
	part, _ := c.Partitioned()
	assert.Equal(t, ids[:1], part, "partitioned at once, without waiting for the peer timeout")
	assert.Equal(t, []string{ids[0].String()}, n.down)
	assert.Empty(t, n.unheard, "down, not cut off")
	assert.Equal(t, uint64(1), c.Stats().GoodbyesHeard)

	c.Step(now+1, countsFrom(ids[0], now-1, "k", 4)) // sent before the goodbye
	now = tickFor(c, now, time.Second, ids[1])
	part, _ = c.Partitioned()
	assert.Equal(t, ids[:1], part, "a late message of its last moments")

	c.Step(now, heartbeatFrom(ids[0], now)) // back
	now = tickFor(c, now, time.Second, ids...)
	part, _ = c.Partitioned()
	assert.Empty(t, part)
	assert.Empty(t, n.down)
}

// tickFor ticks c every 50 ms for d from now (heartbeat checks included),
// with a heartbeat of each PoP of alive at every tick, and returns the
// time reached.
func tickFor(c *Core, now int64, d time.Duration, alive ...identity.PoPID) int64 {
	for end := now + int64(d); now < end; {
		now += int64(50 * time.Millisecond)
		for _, p := range alive {
			c.Step(now, heartbeatFrom(p, now))
		}
		c.Tick(now)
	}
	return now
}

// A goodbye that leaves members behind changes nothing; nor does one of a
// former epoch.
func TestGoodbyeOfOneMember(t *testing.T) {
	ids := popIDs(1)
	c, n, now := goodbyeCore(t, ids)
	c.Step(now, goodbyeFrom(ids[0], ids[0], now, 2))
	old := goodbyeFrom(ids[0], ids[0], now, 0)
	old.Delta.Epoch = 7
	c.Step(now, old)
	now = tickFor(c, now, 500*time.Millisecond) // under the peer timeout
	part, _ := c.Partitioned()
	assert.Empty(t, part)
	assert.Empty(t, n.down)
	assert.Equal(t, uint64(2), c.Stats().GoodbyesHeard)
}

// A node may say goodbye only for itself: a goodbye of PoP ids[0] through
// the subject of ids[1] (on either link), or one through the own PoP's
// subject, is forged and takes no PoP down.
func TestGoodbyeForged(t *testing.T) {
	ids := popIDs(2)
	for _, tc := range []struct {
		name string
		m    Message
	}{
		{"another PoP's subject", goodbyeFrom(ids[0], ids[1], t0, 0)},
		{"region subject of another PoP", func() Message {
			m := goodbyeFrom(ids[0], ids[1], t0, 0)
			m.Link = LinkRegion
			return m
		}()},
		{"own PoP's subject", goodbyeFrom(ids[0], ams1.PoPID, t0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, n, now := goodbyeCore(t, ids)
			tc.m.Delta.SentAt = now
			res := c.Step(now, tc.m)
			assert.True(t, res.Forged)
			now = tickFor(c, now, 500*time.Millisecond) // under the peer timeout
			part, _ := c.Partitioned()
			assert.Empty(t, part)
			assert.Empty(t, n.down)
			assert.Zero(t, c.Stats().GoodbyesHeard)
		})
	}
}

// A node that stops says goodbye on its PoP's subject, with how many
// members its PoP keeps; the last one of a PoP also on the region subject
// under region voices.
func TestGoodbyeSent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []string
		voices  bool
		links   []Link
		left    uint64
	}{
		{"last member", nil, false, []Link{LinkGlobal}, 0},
		{"one of three", []string{"a2#1", "a3#1"}, false, []Link{LinkGlobal}, 2},
		{"last member, region voices", nil, true, []Link{LinkGlobal, LinkRegion}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, PoPLink: true,
				Settings: Settings{RegionVoices: new(tc.voices)}})
			require.NoError(t, err)
			now := t0
			c.SetMembers(now, append([]string{MemberName(ams1)}, tc.members...))
			c.Tick(now)
			c.Ready()
			c.Goodbye(now)
			var links []Link
			for _, m := range c.Ready() {
				require.Equal(t, KindHeartbeat, m.Kind)
				left, ok := goodbyeOf(m.Delta)
				require.True(t, ok)
				assert.Equal(t, tc.left, left)
				assert.Equal(t, ams1, m.Delta.Sender)
				links = append(links, m.Link)
			}
			var want []Link
			for range goodbyeCopies {
				want = append(want, tc.links...)
			}
			assert.Equal(t, want, links)
			c.Step(now, heartbeatFrom(popIDs(1)[0], now))
			c.Tick(now + int64(time.Second))
			c.Flush(now + int64(time.Second))
			assert.Empty(t, c.Ready(), "nothing after the goodbye")
		})
	}
}
