package pop

import (
	"fmt"
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/crdt"
)

// BenchmarkDecideSharedGCRAInterleaved is BenchmarkDecideGCRAInterleaved at
// pop scope: a pop-scope GCRA rule (its TAT read and moved, its admission
// counted for replication) beside a pop-scope rule of one window, in turns
// of 4096 decisions with the same keys and clock; every request is
// admitted, so every GCRA decision takes both of its slots. The ratio
// (gcra/window) is the figure to read. With 100k keys the slots are
// mostly out of cache (a GCRA key takes two, its TAT and its counts, both
// read by a decision); with 1k keys they are in cache (the compute cost).
func BenchmarkDecideSharedGCRAInterleaved(b *testing.B) {
	for _, keys := range []int{benchKeys, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchSharedGCRAInterleaved(b, keys) })
	}
}

func benchSharedGCRAInterleaved(b *testing.B, nkeys int) {
	created, keys := ipv4Keys(nkeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	mk := func(r Rule) *Node {
		n, err := New(Config{
			Self:    crdt.Replica{PoPID: crdt.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
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
	win := mk(Rule{Name: "api", Limit: 1 << 30, Window: time.Minute, Cost: 1, Scope: ScopePoP})
	paced := mk(Rule{Name: "api", Limit: 1 << 25, Window: time.Minute, Cost: 1, Scope: ScopePoP, Algorithm: GCRA})
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
