package repl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated/inflight"
	"github.com/geolimit/geolimit/wire"
)

// A member's in-flight counts of a concurrency rule stop counting when
// the membership view loses it (it died holding slots), and the view is
// kept for members still there.
func TestMemberLeavingDropsItsInFlightCounts(t *testing.T) {
	rules := []pop.Rule{{Name: "uploads", Kind: pop.Concurrency, Limit: 4, Cost: 1, Scope: pop.ScopePoP, LeaseTTL: time.Minute}}
	n, err := pop.New(pop.Config{Self: ams1, Rules: rules})
	require.NoError(t, err)
	cfg := Config{Settings: DefaultSettings(), Node: n.Link(), PoPLink: true}
	c, err := New(cfg)
	require.NoError(t, err)
	now := int64(1_000_000) * int64(time.Millisecond)
	a2 := identity.Replica{PoPID: ams1.PoPID, Node: "a2", Incarnation: 1}
	a3 := identity.Replica{PoPID: ams1.PoPID, Node: "a3", Incarnation: 5}
	c.SetMembers(now, []string{MemberName(a2), MemberName(a3)})
	for _, from := range []identity.Replica{a2, a3} {
		d := *inflight.Section.With(&wire.Delta{Sender: from}, []inflight.Count{{Rule: "uploads", Key: "k", Count: 2, Version: 1}}...)
		st := n.Link().Apply(now, &d, pop.ScopePoP)
		require.Equal(t, 1, st.Inflight.Merged)
	}
	_, members, _ := n.InFlight(now, "uploads", "k")
	require.EqualValues(t, 4, members)

	c.SetMembers(now, []string{MemberName(a3)}) // a2 died
	_, members, _ = n.InFlight(now, "uploads", "k")
	assert.EqualValues(t, 2, members, "the dead member's slots came back, the live one's stay")
	a3again := a3
	a3again.Incarnation = 6
	c.SetMembers(now, []string{MemberName(a3again)}) // a3 restarted: its former incarnation holds nothing
	_, members, _ = n.InFlight(now, "uploads", "k")
	assert.Zero(t, members)
}
