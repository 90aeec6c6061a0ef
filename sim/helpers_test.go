package sim

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// builtins returns the paths of the built-in scenarios.
func builtins(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob("../scenarios/*.yaml")
	require.NoError(t, err)
	live, err := filepath.Glob("../scenarios/live/*.yaml")
	require.NoError(t, err)
	paths = append(paths, live...)
	require.GreaterOrEqual(t, len(paths), 8)
	return paths
}

func mustParse(t testing.TB, src string) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(src))
	require.NoError(t, err)
	return sc
}

// gridTopology writes the topology of regions regions of pops PoPs of nodes
// nodes each: regions r<first>..., PoPs r<region>p<first>...
func gridTopology(b *strings.Builder, regions, pops, nodes, first int) {
	b.WriteString("topology:\n")
	for r := first; r < first+regions; r++ {
		fmt.Fprintf(b, "  - {region: r%d, pops: [", r)
		for p := first; p < first+pops; p++ {
			if p > first {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "{name: r%dp%d, nodes: %d}", r, p, nodes)
		}
		b.WriteString("]}\n")
	}
}

// gridScenario returns a scenario of regions regions of pops PoPs of nodes
// nodes each (PoP "r<i>p<j>" of region "r<i>"), on the network the
// cost tests use, with the given seed and duration and the YAML lines of
// the replication section, one rule and one stream.
func gridScenario(name string, seed int, duration string, regions, pops, nodes int, replication, rule, traffic string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nseed: %d\nduration: %s\n", name, seed, duration)
	gridTopology(&b, regions, pops, nodes, 0)
	fmt.Fprintf(&b, `network:
  intra_pop: {latency: 1ms}
  inter_pop: {latency: 10ms, jitter: 2ms}
  inter_region: {latency: 80ms, jitter: 10ms}
replication: %s
rules:
  - %s
traffic:
  - %s
`, replication, rule, traffic)
	return b.String()
}
