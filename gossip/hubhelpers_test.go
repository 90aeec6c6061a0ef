package gossip_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// The tests over an in-memory network (package memhub, which imports this
// package) are external tests; these are their copies of the helpers of
// helpers_test.go.

// poll is how often a test waiting for a condition checks it.
const poll = 2 * time.Millisecond

// testRules, newNode and total are gossiptest's.
func testRules() []pop.Rule { return gossiptest.Rules() }

func newNode(t testing.TB, region, popName, name string, rules []pop.Rule) *pop.Node {
	t.Helper()
	return gossiptest.NewNode(t, region, popName, name, rules)
}

func total(n *pop.Node, rule, key string) uint64 { return gossiptest.Total(n, rule, key) }

// member is one node with its replicator.
type member struct {
	node *pop.Node
	rep  *gossip.Replicator
	id   identity.PoPID
	name string
}

func startMember(t testing.TB, ctx context.Context, n *pop.Node, opts gossip.Options) *member {
	t.Helper()
	opts.Node = n.Link()
	r, err := gossip.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	s := n.Link().Self()
	return &member{node: n, rep: r, id: s.PoPID, name: s.Node}
}

// popNames returns the names (region/pop) of ids.
func popNames(ids ...identity.PoPID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
