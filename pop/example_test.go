package pop_test

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// A node decides locally; its PoP's aggregate, flushed once the PoP agreed
// on an epoch, teaches a node of another PoP.
func ExampleNode() {
	rules := []pop.Rule{{Name: "api", Limit: 5, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal}}
	ams, _ := pop.New(pop.Config{Self: crdt.Replica{PoPID: crdt.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, Rules: rules})
	iad, _ := pop.New(pop.Config{Self: crdt.Replica{PoPID: crdt.PoPID{Region: "us", PoP: "iad"}, Node: "iad-1", Incarnation: 1}, Rules: rules})
	ams.SetEpoch(1) // agreed by ams's members
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()

	for i := 0; i < 4; i++ {
		ams.Decide(now, "api", "203.0.113.7", 1)
	}
	b := ams.Flush(now, nil)                // nil: ams-1 publishes every key
	iad.Apply(now, &b.PoP, pop.ScopeGlobal) // over NATS in the daemon
	fmt.Println(b.PoP.Sender, len(b.Local.Entries))
	d, _ := iad.Decide(now, "api", "203.0.113.7", 1)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = iad.Decide(now, "api", "203.0.113.7", 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// eu/ams/*#1 1
	// true 0
	// false 1m12s
}
