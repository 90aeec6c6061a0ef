package repl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// regionBeat is a region heartbeat of PoP from listing the PoPs heard,
// each heard ago milliseconds before.
func regionBeat(from identity.PoPID, at int64, ago uint64, heard ...string) Message {
	d := &wire.Delta{Sender: identity.Replica{PoPID: from, Node: "x", Incarnation: 1}, SentAt: at, Epoch: 1}
	for _, h := range heard {
		d.Entries = append(d.Entries, crdt.Entry{Rule: controlRule, Key: liveKeyPrefix + h, Count: ago})
	}
	return Message{Link: LinkRegion, Kind: KindDelta, From: from, Delta: d}
}

// remote returns what c knows of PoP id (false: not tracked).
func remote(c *Core, now int64, id identity.PoPID) (RemotePoP, bool) {
	for _, p := range c.RemotePoPs(now) {
		if p.PoPID == id {
			return p, true
		}
	}
	return RemotePoP{}, false
}

// A region's heartbeat speaks for the PoPs of its own region only: those
// it lists are heard, as long ago as it says; a PoP of the receiver's
// region or of a third region it lists is not.
func TestRegionBeatSpeaksForItsRegionOnly(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	usDca := identity.PoPID{Region: "us", PoP: "dca"}
	apSin := identity.PoPID{Region: "ap", PoP: "sin"}
	euZzz := identity.PoPID{Region: "eu", PoP: "zzz"}
	res := c.Step(now, regionBeat(usIad, now, 300, "us/dca", "eu/zzz", "ap/sin"))
	assert.False(t, res.Forged)
	p, ok := remote(c, now, usDca)
	require.True(t, ok, "a PoP of the sender's region is heard")
	assert.Equal(t, now-int64(300*time.Millisecond), p.LastHeard, "as long ago as the heartbeat says")
	_, ok = remote(c, now, apSin)
	assert.False(t, ok, "a PoP of a third region is not")
	_, ok = remote(c, now, euZzz)
	assert.False(t, ok, "a PoP of the receiver's region is not")

	// Heard through its region only, it times out PeerTimeout after its
	// region last heard it.
	later := now + int64(2*time.Second)
	c.Step(later, regionBeat(usIad, later, 1900, "us/dca"))
	c.Tick(later)
	p, _ = remote(c, later, usDca)
	assert.False(t, p.Partitioned)
	assert.Equal(t, later-int64(1900*time.Millisecond), p.LastHeard)
}

// A region heartbeat that carries counts is no heartbeat: forged, nothing
// of it taken.
func TestRegionBeatWithCountsIsForged(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	m := regionBeat(usIad, now, 0, "us/dca")
	m.Delta.Entries = append(m.Delta.Entries, crdt.Entry{Rule: "api", Key: "k", Window: now / int64(ruleWindow), Count: 500})
	res := c.Step(now, m)
	assert.True(t, res.Forged)
	assert.Zero(t, estimate(t, c, now, "k"))
	_, ok := remote(c, now, identity.PoPID{Region: "us", PoP: "dca"})
	assert.False(t, ok)
}

// The PoPs of a region take turns to send its heartbeat to the other
// regions: of three PoPs heard (and able to speak for it), one heartbeat
// slot in three is this PoP's, and the others go to its region only.
func TestRegionBeatTurns(t *testing.T) {
	c, now := regionCore(t, ams1, euFra, usIad)
	for range 8 {
		now += int64(500 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Step(now, countsFrom(euFra, now, "k", 1))
		c.Step(now, heartbeatFrom(euAaa, now))
		c.Step(now, countsFrom(euAaa, now, "k", 1))
		c.Step(now, heartbeatFrom(usIad, now))
		c.Tick(now)
	}
	c.Ready()
	region, global := 0, 0
	for range 30 {
		now += int64(500 * time.Millisecond)
		c.Step(now, heartbeatFrom(euFra, now))
		c.Step(now, heartbeatFrom(euAaa, now))
		c.Step(now, heartbeatFrom(usIad, now))
		c.Tick(now)
		for _, m := range c.Ready() {
			if m.Kind != KindHeartbeat {
				continue
			}
			if m.Link == LinkRegion {
				region++
				names := map[string]bool{}
				for _, e := range m.Delta.Entries {
					if e.Rule == controlRule {
						names[e.Key[len(liveKeyPrefix):]] = true
					}
				}
				assert.Equal(t, map[string]bool{"eu/aaa": true, "eu/ams": true, "eu/fra": true}, names, "the PoPs of its region it hears, and itself: it lists")
			} else {
				global++
			}
		}
	}
	assert.Equal(t, 10, region, "one heartbeat in three to every region")
	assert.Equal(t, 20, global, "the others to its region")
}
