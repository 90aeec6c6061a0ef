package gossip_test

import (
	"context"
	"fmt"
	"time"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/memhub"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// Two PoPs replicate a global rule over an in-memory memhub.Hub (in production:
// gossip.NATSConnect between PoPs, gossip.MemberlistConnect inside one).
func ExampleStart() {
	hub := memhub.New(1)
	defer hub.Close()
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Hour, Cost: 1, Scope: pop.ScopeGlobal}}
	var nodes []*pop.Node
	for i, id := range []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}} {
		n, err := pop.New(pop.Config{Self: identity.Replica{PoPID: id, Node: "n1", Incarnation: uint64(i + 1)}, Rules: rules})
		if err != nil {
			panic(err)
		}
		opts := gossip.DefaultOptions()
		opts.FlushInterval = 5 * time.Millisecond
		opts.Node, opts.Global = n.Link(), hub.Global(id, "n1")
		r, err := gossip.Start(context.Background(), opts)
		if err != nil {
			panic(err)
		}
		defer r.Close()
		nodes = append(nodes, n)
	}
	for range 3 {
		if _, err := nodes[0].Decide(time.Now().UnixNano(), "api", "203.0.113.7", 1); err != nil {
			panic(err)
		}
	}
	// Poll until iad has merged the counts (an example has no testing.T
	// for require.Eventually).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if v, _ := nodes[1].View(time.Now().UnixNano(), "api", "203.0.113.7"); v.Estimate >= 3 {
			break
		}
	}
	v, _ := nodes[1].View(time.Now().UnixNano(), "api", "203.0.113.7")
	var total uint64
	for _, w := range v.Windows {
		total += w.Total
	}
	fmt.Println("iad sees", total)
	// Output: iad sees 3
}
