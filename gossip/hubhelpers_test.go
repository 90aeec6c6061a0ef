package gossip_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/pop"
)

// The tests over an in-memory network (package memhub, which imports this
// package) are external tests; these are their copies of the helpers of
// helpers_test.go.

// poll is how often a test waiting for a condition checks it.
const poll = 2 * time.Millisecond

var incarnation atomic.Uint64

// testRules: a global rule and a pop rule, long windows so that a test never
// crosses a window boundary that matters.
func testRules() []pop.Rule {
	return []pop.Rule{
		{Name: "api", Limit: 1 << 30, Window: time.Hour, Cost: 1, Scope: pop.ScopeGlobal},
		{Name: "per-ip", Limit: 1 << 30, Window: time.Hour, Cost: 1, Scope: pop.ScopePoP},
		{Name: "local", Limit: 1 << 30, Window: time.Hour, Cost: 1, Scope: pop.ScopeNode},
	}
}

func newNode(t testing.TB, region, popName, name string, rules []pop.Rule) *pop.Node {
	t.Helper()
	n, err := pop.New(pop.Config{
		Self:  crdt.Replica{PoPID: crdt.PoPID{Region: region, PoP: popName}, Node: name, Incarnation: incarnation.Add(1)},
		Rules: rules,
	})
	require.NoError(t, err)
	return n
}

// total returns the node's view of key's current-window total under rule.
func total(n *pop.Node, rule, key string) uint64 {
	v, err := n.View(time.Now().UnixNano(), rule, key)
	if err != nil {
		return 0
	}
	var sum uint64
	for _, w := range v.Windows {
		sum = max(sum, w.Total)
	}
	return sum
}

// member is one node with its replicator.
type member struct {
	node *pop.Node
	rep  *gossip.Replicator
	id   crdt.PoPID
	name string
}

func startMember(t testing.TB, ctx context.Context, n *pop.Node, opts gossip.Options) *member {
	t.Helper()
	opts.Node = n
	r, err := gossip.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	s := n.Self()
	return &member{node: n, rep: r, id: s.PoPID, name: s.Node}
}

// popNames returns the names (region/pop) of ids.
func popNames(ids ...crdt.PoPID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
