package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A global share rule's asked cost travels as a count of its asked
// window: us's PoP total of it reaches eu, which merges it like any
// count. The window is no rule a client may name: not decided, viewed nor
// listed. A rule set that no longer shares stops counting.
func TestAskedWindowReplicatesAndStaysHidden(t *testing.T) {
	eu, us := sideNodes(t)
	W := int64(10 * time.Second)
	now := (t0/W + 1) * W
	for range 25 { // 20 admitted, 5 refused
		_, err := us.Decide(now, "api", "k", 1)
		require.NoError(t, err)
	}
	out := us.Link().Flush(now+1, nil)
	got := map[string]uint64{}
	for _, e := range out.PoP.Entries {
		if e.Rule == "api"+askedWire {
			got[e.Key] += e.Count
		}
	}
	assert.Equal(t, map[string]uint64{askedKey: 25, refusedKey: 5}, got, "the PoP totals of what us was asked and refused")
	st := eu.Link().Apply(now+1, &out.PoP, ScopeGlobal)
	assert.Zero(t, st.UnknownRule)
	assert.Zero(t, st.Clamped)
	assert.Equal(t, 3, st.Merged, "the key's count and the asked window's two")

	_, err := eu.Decide(now+2, "api"+askedWire, askedKey, 1)
	assert.ErrorIs(t, err, ErrUnknownRule)
	_, err = eu.View(now+2, "api"+askedWire, askedKey)
	assert.ErrorIs(t, err, ErrUnknownRule)
	for _, r := range eu.Rules() {
		assert.Equal(t, "api", r.Name)
	}
	assert.NotContains(t, eu.Stats().KeysByRule, "api"+askedWire)

	// Keep instead of share: no refused window, nothing counted.
	require.NoError(t, us.SetRules([]Rule{{Name: "api", Limit: 20, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Keep}}))
	for range 5 {
		_, _ = us.Decide(now+3, "api", "k", 1)
	}
	out = us.Link().Flush(now+4, nil)
	for _, e := range out.PoP.Entries {
		assert.NotEqual(t, "api"+askedWire, e.Rule)
	}
}

// A forged refused count (the most a count can say, from a replica of
// either side, or several) moves a side's part of the demand no further
// than a fleet refusing refusedReadCap times its admits would, and a part
// read high caps each key's growth at the fleet's demand over it: no
// takeover (which asks growth of 1 + ShareStep at least) follows from it.
// Forged asked counts take the fleet's demand no further than its admits
// and that much refused. A PoP that says it was asked less than it
// admitted, or says nothing, counts what it admitted.
func TestForgedAskedCountIsBounded(t *testing.T) {
	const most = ^uint64(0)
	unheard := map[string]bool{"us/iad": true, "us/ord": true}
	d := &sideDemand{base: 1000, baseScale: 1, baseKeys: 10}
	d.askedPart([2]uint64{500, 1000}, addSide([2]uint64{}, []popCount{{"eu/ams", most}, {"us/iad", most}}, unheard), most)
	assert.InDelta(t, (500.0+4000)/(1000+4000), d.part, 1e-9)
	assert.InDelta(t, 5000, d.fleetAsked, 1e-9)
	c, ok := d.capFor(100, true)
	require.True(t, ok)
	assert.Less(t, float64(c)/100, 1+DefaultShareStep, "a key's growth is counted up to the fleet's demand over the part")

	// Two PoPs of the other side each claiming nearly the most: the sum
	// saturates, it does not wrap.
	d = &sideDemand{base: 1000, baseScale: 1, baseKeys: 10}
	d.askedPart([2]uint64{500, 1000}, addSide([2]uint64{}, []popCount{{"eu/ams", 1000}, {"us/iad", most - 600}, {"us/ord", most - 600}}, unheard), 3000)
	assert.InDelta(t, (500.0+1000)/(1000+4000), d.part, 1e-9)
	assert.LessOrEqual(t, d.asked, 1.0)

	d = &sideDemand{base: 1000, baseScale: 1, baseKeys: 10}
	d.askedPart([2]uint64{500, 1000}, [2]uint64{0, most}, 3000) // claimed by the other side
	assert.InDelta(t, 500.0/(1000+4000), d.part, 1e-9)
	assert.InDelta(t, 0.2, d.asked, 1e-9)

	assert.Equal(t, []popCount{{"eu/ams", 400}, {"us/iad", most}, {"us/ord", 50}},
		atLeast([]popCount{{"eu/ams", 100}, {"us/iad", most}}, []popCount{{"eu/ams", 400}, {"us/iad", 600}, {"us/ord", 50}}))

	d = &sideDemand{}
	d.askedPart([2]uint64{500, 1000}, [2]uint64{0, 0}, 1000)
	assert.Zero(t, d.asked, "no refused count: the part of the admits")
	assert.Zero(t, d.part)
	assert.Zero(t, d.fleetAsked)
}

// A global share rule takes two of the store's counted windows (its own
// and its asked window): a rule set past the store's cap is refused, its
// error naming what counts.
func TestAskedWindowsCountTowardTheWindowCap(t *testing.T) {
	share := func(n int) []Rule {
		rules := make([]Rule, n)
		for i := range rules {
			rules[i] = Rule{Name: "r" + strconv.Itoa(i), Limit: 20, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share}
		}
		return rules
	}
	n, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}})
	require.NoError(t, err)
	require.NoError(t, n.SetRules(share(crdt.MaxRules/2)))
	assert.Len(t, n.Rules(), crdt.MaxRules/2)
	n, err = New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}})
	require.NoError(t, err)
	err = n.SetRules(share(crdt.MaxRules/2 + 1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "counted windows")
}

// A forged asked count of the own side grows a share no further than a
// failover of the whole fleet's demand onto the side would: the most a
// count can say puts the side past the fleet's demand before the cut, a
// surge, and no share grows; a count that puts it at twice its part (the
// fleet's demand) takes a share to the whole limit, and no further.
func TestForgedOwnAskedCountGrowsNoFurtherThanAFailover(t *testing.T) {
	for _, tc := range []struct {
		asked uint64
		want  float64
	}{{^uint64(0), 0.5}, {2000, 1}, {1000, 0.5}} {
		d := &sideDemand{part: 0.5, fleetAsked: 2000, sideAsked: func(int64) uint64 { return tc.asked }}
		d.overFleet(3, 1, DefaultShareStep) // the window's close reads it
		sg, known := d.sideGrowth(3)
		require.True(t, known)
		_, f := d.bySide(3, 1, DefaultShareStep)
		sh := &share{snap: 0.5, frac: 0.5, prev: 0.5, scale: 1, rise: DefaultShareRise, side: d}
		sh.follow(f, f, DefaultShareFloor, DefaultShareStep, true, false)
		assert.InDelta(t, tc.want, sh.frac, 1e-9, "asked %d: side's growth %g", tc.asked, sg)
	}
}
