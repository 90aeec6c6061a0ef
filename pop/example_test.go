package pop_test

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// A node decides locally; its PoP's aggregate, flushed once the PoP agreed
// on an epoch, teaches a node of another PoP.
func ExampleNode() {
	rules := []pop.Rule{{Name: "api", Limit: 5, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal}}
	ams, _ := pop.New(pop.Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, Rules: rules})
	iad, _ := pop.New(pop.Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "iad-1", Incarnation: 1}, Rules: rules})
	ams.Link().SetEpoch(1) // agreed by ams's members
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()

	for i := 0; i < 4; i++ {
		ams.Decide(now, "api", "203.0.113.7", 1)
	}
	b := ams.Link().Flush(now, nil)                // nil: ams-1 publishes every key
	iad.Link().Apply(now, &b.PoP, pop.ScopeGlobal) // over NATS in the daemon
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

// A request checked against two rules, all or nothing: when one denies,
// nothing is counted under the other, and the denying check binds.
func ExampleNode_DecideChecks() {
	n, _ := pop.New(pop.Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
		Rules: []pop.Rule{
			{Name: "per-user", Limit: 100, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal},
			{Name: "login", Limit: 2, Window: time.Minute, Cost: 1, Scope: pop.ScopePoP},
		}})
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	user, _ := n.Handle("per-user")
	login, _ := n.Handle("login")
	res := make([]pop.Result, 2)
	for i := 0; i < 3; i++ {
		req := pop.Request{Combine: pop.All, Checks: []pop.Check{{Rule: user, Key: "bob"}, {Rule: login, Key: "203.0.113.7"}}}
		out, _ := n.DecideChecks(now, &req, res)
		fmt.Println(out.Allowed, out.Counted, req.Checks[out.Binding].Rule.Rule().Name, res[0].Remaining)
	}
	// Output:
	// true 2 login 99
	// true 2 login 98
	// false 0 login 98
}
