package gossiptest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

var incarnation atomic.Uint64

// Rules are a global, a pop and a node rule with limits no test reaches and
// hour windows, so that a test never crosses a window boundary that
// matters.
func Rules() []pop.Rule {
	return []pop.Rule{
		{Name: "api", Limit: 1 << 30, Window: time.Hour, Cost: 1, Scope: pop.ScopeGlobal},
		{Name: "per-ip", Limit: 1 << 30, Window: time.Hour, Cost: 1, Scope: pop.ScopePoP},
		{Name: "local", Limit: 1 << 30, Window: time.Hour, Cost: 1, Scope: pop.ScopeNode},
	}
}

// NewNode returns a node region/popName/name with rules, its incarnation
// new in the process.
func NewNode(t testing.TB, region, popName, name string, rules []pop.Rule) *pop.Node {
	t.Helper()
	return NewNodeConfig(t, pop.Config{
		Self:  identity.Replica{PoPID: identity.PoPID{Region: region, PoP: popName}, Node: name},
		Rules: rules,
	})
}

// NewNodeConfig returns a node of cfg, its incarnation new in the process.
func NewNodeConfig(t testing.TB, cfg pop.Config) *pop.Node {
	t.Helper()
	cfg.Self.Incarnation = incarnation.Add(1)
	n, err := pop.New(cfg)
	require.NoError(t, err)
	return n
}

// Total returns the node's view of key's current-window total under rule
// (the largest of its live windows), 0 when it has none.
func Total(n *pop.Node, rule, key string) uint64 {
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
