package pop

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/identity"
)

// BenchmarkDecideGCRA is BenchmarkDecide's decision for a GCRA rule, beside
// a rule of one window of the same scope and limit in the same run: read
// the coarse clock, look up the rule and one of 100k keys, decide, count.
// Run with -count to alternate them.
func BenchmarkDecideGCRA(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	for _, tc := range []struct {
		name string
		rule Rule
	}{
		{"window", Rule{Name: "api", Limit: 1 << 30, Window: time.Minute, Cost: 1, Scope: ScopeNode}},
		{"gcra", Rule{Name: "api", Limit: 1 << 25, Window: time.Minute, Cost: 1, Scope: ScopeNode, Algorithm: GCRA}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n, err := New(Config{
				Self:    identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
				Rules:   []Rule{tc.rule},
				MaxKeys: 4 * len(created),
			})
			if err != nil {
				b.Fatal(err)
			}
			now := clk.Now()
			for _, k := range created {
				if _, err := n.Decide(now, "api", k, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecideGCRAInterleaved decides on two nodes in turn, 4096
// decisions at a time, with the same keys and clock: one whose rule is a
// GCRA rule, one whose rule has one window. Small turns expose both to the
// same load of the machine, so their ratio (gcra/window) holds where
// separate runs on a busy machine vary by more than the difference.
func BenchmarkDecideGCRAInterleaved(b *testing.B) {
	benchGCRAInterleaved(b, benchKeys, ScopeNode)
}

// benchGCRAInterleaved decides nkeys keys on two nodes in turn, 4096
// decisions at a time: one whose rule of scope is a GCRA rule, one whose
// rule of scope has one window; it reports both and their ratio.
func benchGCRAInterleaved(b *testing.B, nkeys int, scope Scope) {
	created, keys := ipv4Keys(nkeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	mk := func(r Rule) *Node {
		n, err := New(Config{
			Self:    identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
			Rules:   []Rule{r},
			MaxKeys: 4 * len(created),
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range created {
			if _, err := n.Decide(clk.Now(), "api", k, 1); err != nil {
				b.Fatal(err)
			}
		}
		return n
	}
	win := mk(Rule{Name: "api", Limit: 1 << 30, Window: time.Minute, Cost: 1, Scope: scope})
	paced := mk(Rule{Name: "api", Limit: 1 << 25, Window: time.Minute, Cost: 1, Scope: scope, Algorithm: GCRA})
	var tw, tg time.Duration
	run := func(n *Node, from, to int) time.Duration {
		start := time.Now()
		for i := from; i < to; i++ {
			if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		next := min(done+4096, b.N)
		tw += run(win, done, next)
		tg += run(paced, done, next)
		done = next
	}
	b.ReportMetric(float64(tw.Nanoseconds())/float64(b.N), "window-ns/op")
	b.ReportMetric(float64(tg.Nanoseconds())/float64(b.N), "gcra-ns/op")
	b.ReportMetric(float64(tg)/float64(tw), "gcra/window")
}
