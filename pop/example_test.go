package pop_test

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// A node decides locally; its flushed delta teaches a node of another PoP.
func ExampleNode() {
	rules := []pop.Rule{{Name: "api", Limit: 5, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal}}
	ams, _ := pop.New(pop.Config{Self: crdt.Replica{Region: "eu", PoP: "ams", Node: "ams-1", Incarnation: 1}, Rules: rules})
	iad, _ := pop.New(pop.Config{Self: crdt.Replica{Region: "us", PoP: "iad", Node: "iad-1", Incarnation: 1}, Rules: rules})
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()

	for i := 0; i < 4; i++ {
		ams.Decide(now, "api", "203.0.113.7", 1)
	}
	for _, out := range ams.Flush(now) {
		iad.Apply(now, &out.Delta, pop.ScopeGlobal) // over NATS in the daemon
	}
	d, _ := iad.Decide(now, "api", "203.0.113.7", 1)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = iad.Decide(now, "api", "203.0.113.7", 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// true 0
	// false 1m12s
}
