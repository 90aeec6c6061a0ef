package repl

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With region voices a restarted node takes no PoP total of its own region
// from its state file; everything else it takes as without them.
func TestSettingsRestorer(t *testing.T) {
	self := identity.PoPID{Region: "us", PoP: "ord"}
	for _, tc := range []struct {
		name   string
		r      identity.Replica
		voices bool
		want   bool
	}{
		{"own PoP total, voices off", identity.PoPReplica(self, 3), false, true},
		{"own PoP total", identity.PoPReplica(self, 3), true, false},
		{"PoP total of the own region", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "sjc"}, 4), true, false},
		{"PoP total of another region", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 4), true, true},
		{"another region's total", identity.RegionReplica("eu", 5), true, true},
		{"a member's count", identity.Replica{PoPID: self, Node: "ord-2", Incarnation: 7}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Settings{RegionVoices: new(tc.voices)}.Restorer(self)(tc.r))
		})
	}
}

// Under region voices a silent PoP of another region whose region is still
// heard is silent to its region too (its heartbeats no longer list it): it
// is taken for down, not cut off. Once its region falls silent as well,
// both are cut off.
func TestRegionHearsItGone(t *testing.T) {
	usDca := identity.PoPID{Region: "us", PoP: "dca"}
	n := &downNode{Node: testNode(t, ams1).Link()}
	s := DefaultSettings()
	s.RegionVoices, s.PeerTimeout = new(true), time.Second
	s.ExpectedPoPs = popNames(usDca, usIad)
	c, err := New(Config{Node: n, GlobalLink: true, Settings: s})
	require.NoError(t, err)
	now := t0
	c.Tick(now)
	c.Step(now, regionBeat(usIad, now, 0, "us/dca"))
	for range 40 { // 2s: dca no longer listed, iad heard
		now += int64(50 * time.Millisecond)
		c.Step(now, regionBeat(usIad, now, 0))
		c.Tick(now)
	}
	part, _ := c.Partitioned()
	assert.Equal(t, []identity.PoPID{usDca}, part)
	assert.Equal(t, []string{"us/dca"}, n.down)
	assert.Empty(t, n.unheard)

	for range 40 { // us silent
		now += int64(50 * time.Millisecond)
		c.Tick(now)
	}
	part, _ = c.Partitioned()
	assert.Equal(t, []identity.PoPID{usDca, usIad}, part)
	assert.Empty(t, n.down)
	assert.Equal(t, []string{"us/dca", "us/iad", "us/*"}, n.unheard)
	assert.Equal(t, []string{"us/dca", "us/iad"}, n.pops, "the PoPs of the fleet, told before the unheard set")
}

// Under region voices a PoP alone in its region is heard elsewhere only
// through its region's heartbeat stream, which is its own: back under a
// new epoch after a silence, it restarted, and its next silence is taken
// for a crash, as without region voices; back under the epoch it had, it
// was cut off.
func TestLonePoPOfARegionRestarts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		epoch uint64
		down  bool
	}{
		{"new epoch: a crash", 2, true},
		{"same epoch: a cut", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &downNode{Node: testNode(t, ams1).Link()}
			s := DefaultSettings()
			s.RegionVoices, s.PeerTimeout = new(true), time.Second
			s.ExpectedPoPs = popNames(usIad)
			c, err := New(Config{Node: n, GlobalLink: true, Settings: s})
			require.NoError(t, err)
			now := t0
			c.Tick(now)
			beats := func(epoch uint64, d time.Duration) {
				for range int(d / (50 * time.Millisecond)) {
					now += int64(50 * time.Millisecond)
					if epoch != 0 {
						m := regionBeat(usIad, now, 0)
						m.Delta.Epoch = epoch
						c.Step(now, m)
					}
					c.Tick(now)
				}
			}
			beats(1, time.Second)
			beats(0, 2*time.Second) // silent: cut or crashed, nothing tells yet
			part, _ := c.Partitioned()
			require.Equal(t, []identity.PoPID{usIad}, part)
			assert.Equal(t, []string{"us/iad", "us/*"}, n.unheard, "the first silence is a cut")
			beats(tc.epoch, time.Second) // back
			part, _ = c.Partitioned()
			require.Empty(t, part)
			beats(0, 2*time.Second) // silent again
			part, _ = c.Partitioned()
			require.Equal(t, []identity.PoPID{usIad}, part)
			if tc.down {
				assert.Equal(t, []string{"us/iad", "us/*"}, n.down, "its region, down with it")
				assert.Empty(t, n.unheard)
			} else {
				assert.Empty(t, n.down)
				assert.Equal(t, []string{"us/iad", "us/*"}, n.unheard)
			}
		})
	}
}
