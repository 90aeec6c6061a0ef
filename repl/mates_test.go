package repl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
)

// mateBeat is a heartbeat of PoP from at at that lists itself and the PoPs
// of its region named in hears as heard ago milliseconds before.
func mateBeat(from identity.PoPID, at int64, ago uint64, hears ...string) Message {
	m := heartbeatFrom(from, at)
	m.Delta.Entries = append(m.Delta.Entries, crdt.Entry{Rule: controlRule, Key: liveKeyPrefix + from.String()})
	for _, h := range hears {
		m.Delta.Entries = append(m.Delta.Entries, crdt.Entry{Rule: controlRule, Key: liveKeyPrefix + h, Count: ago})
	}
	return m
}

// Without region voices, a silent PoP whose region's other PoP still
// heartbeats here without listing it is down, not cut off: its first
// crash. One that its region still hears is cut off from this node only,
// and a region silent whole is cut off; so is a PoP whose mates send no
// list (an older version). What a PoP of another region lists of it
// (iad, here, all along) is not that PoP's to say.
func TestMatesHearItGone(t *testing.T) {
	euAms, euFra := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "eu", PoP: "fra"}
	usIad := identity.PoPID{Region: "us", PoP: "iad"}
	for _, tc := range []struct {
		name    string
		fraBeat func(now int64) Message // nil: fra silent too
		down    []string
		unheard []string
	}{
		{"ams gone from its region: down", func(now int64) Message { return mateBeat(euFra, now, 0) }, []string{"eu/ams"}, nil},
		{"ams heard by its region: cut off", func(now int64) Message { return mateBeat(euFra, now, 40, "eu/ams") }, nil, []string{"eu/ams"}},
		{"the region silent: cut off", nil, nil, []string{"eu/ams", "eu/fra"}},
		{"no list: cut off", func(now int64) Message { return heartbeatFrom(euFra, now) }, nil, []string{"eu/ams"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sg1 := identity.Replica{PoPID: identity.PoPID{Region: "ap", PoP: "sin"}, Node: "sin-1", Incarnation: 1}
			n := &downNode{Node: testNode(t, sg1).Link()}
			s := DefaultSettings()
			s.RegionVoices, s.PeerTimeout = new(false), time.Second
			s.ExpectedPoPs = popNames(euAms, euFra, usIad)
			c, err := New(Config{Node: n, GlobalLink: true, Settings: s})
			require.NoError(t, err)
			now := t0
			c.Tick(now)
			for range 20 { // 1s: every PoP heard
				now += int64(50 * time.Millisecond)
				c.Step(now, mateBeat(euAms, now, 0, "eu/fra"))
				c.Step(now, mateBeat(euFra, now, 0, "eu/ams"))
				c.Step(now, mateBeat(usIad, now, 0))
				c.Tick(now)
			}
			for range 60 { // 3s: ams silent
				now += int64(50 * time.Millisecond)
				if tc.fraBeat != nil {
					c.Step(now, tc.fraBeat(now))
				}
				c.Step(now, mateBeat(usIad, now, 0, "eu/ams")) // not iad's to say
				c.Tick(now)
			}
			assert.ElementsMatch(t, tc.down, n.down, "down")
			assert.ElementsMatch(t, tc.unheard, n.unheard, "cut off")
		})
	}
}
