package repl

import (
	"fmt"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// Heartbeats of 500 invented PoPs that then go silent, against a node that
// names no expected PoPs: the share rule still admits its whole limit on
// this side, for a key it saw before the silence and for a new one. Only a
// PoP whose counts were merged has a traffic share whose silence cuts one.
func TestInventedPoPsCutNoShare(t *testing.T) {
	const limit = 120
	rules := []pop.Rule{{Name: "api", Limit: limit, Window: ruleWindow, Cost: 1, Scope: pop.ScopeGlobal, OnPartition: pop.Share}}
	n, err := pop.New(pop.Config{Self: ams1, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Node: n.Link(), GlobalLink: true, Relay: true, Settings: Settings{FlushInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	win := int64(ruleWindow)
	now := (t0/win + 1) * win // the start of a window
	c.Tick(now)
	// A window of traffic on this side, seen whole.
	for range 30 {
		if _, err := n.Decide(now, "api", "old", 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		c.Step(now, heartbeatFrom(identity.PoPID{Region: "x", PoP: fmt.Sprintf("p%03d", i)}, now))
	}
	end := now + win + int64(ruleWindow)/2
	for now < end { // silent for a window and a half: far past the peer timeout
		now += int64(50 * time.Millisecond)
		c.Tick(now)
		c.Ready()
	}
	part, _ := c.Partitioned()
	if st := n.Partition(now); len(part) != 0 || st.Partitioned {
		t.Errorf("%d PoPs partitioned, node partitioned %v (side share %.3f): want none", len(part), st.Partitioned, st.SideShare)
	}
	for _, key := range []string{"old", "new"} {
		admitted := 0
		for range limit {
			d, err := n.Decide(now, "api", key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		t.Logf("key %s: %d of %d admitted", key, admitted, limit)
		if admitted < limit-30 {
			t.Errorf("key %s: %d of %d admitted: the invented PoPs' silence cut this side's share", key, admitted, limit)
		}
	}
}
