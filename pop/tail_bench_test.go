package pop

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// BenchmarkDecideTail measures the latency tail of Decide while the node
// replicates: one goroutine decides on 100k keys in random order, timing
// every call, while another does what the replicator does with a node of
// 100k live keys, as fast as it can: Flush and encode the changes, and every
// tenth round AntiEntropy and encode everything. The global sub-benchmark
// decides on the replicated rule, node on a node-scope rule of the same
// node, whose 100k global keys the replication goroutine keeps walking;
// quiet is the baseline: the other goroutine only spins on the CPU, without
// locks or allocations, so what other load on the machine does to the tail
// shows there too.
// It reports the p50, p99 and p99.9 and the longest call, in ns, and how
// many calls took over 100µs (stalls).
//
//	go test ./pop -run '^$' -bench DecideTail -benchtime 3000000x -cpu 2
func BenchmarkDecideTail(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	for _, tc := range []struct{ name, rule string }{{"global", "global"}, {"node", "node"}, {"quiet", "global"}} {
		rule := tc.rule
		b.Run(tc.name, func(b *testing.B) {
			n, err := New(Config{
				Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
				Rules: []Rule{
					{Name: "global", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
					{Name: "node", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeNode},
				},
				MaxKeys: 4 * len(keys),
			})
			if err != nil {
				b.Fatal(err)
			}
			n.Link().SetEpoch(1)
			for _, k := range created {
				for _, r := range []string{"global", "node"} {
					if _, err := n.Decide(now, r, k, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			lat := make([]uint32, b.N)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var rounds, sent atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				if tc.name == "quiet" {
					x := uint64(1)
					for !stop.Load() {
						for range 1000 {
							x ^= x << 13
							x ^= x >> 7
							x ^= x << 17
						}
					}
					sent.Add(int64(x & 1))
					return
				}
				for i := 0; !stop.Load(); i++ {
					bt := n.Link().Flush(now, nil)
					if i%10 == 0 {
						bt = n.Link().AntiEntropy(now, nil)
					}
					for _, d := range []*wire.Delta{&bt.Local, &bt.PoP} {
						msgs, err := wire.Encode(d, 0)
						if err != nil {
							b.Error(err)
							return
						}
						for _, m := range msgs {
							sent.Add(int64(len(m)))
						}
					}
					rounds.Add(1)
				}
			}()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := n.Decide(now, rule, keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
				lat[i] = uint32(min(time.Since(t0), 1<<32-1))
			}
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			stalls := 0
			for _, l := range lat {
				if l > 100_000 {
					stalls++
				}
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
			b.ReportMetric(q(0.5), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
			b.ReportMetric(q(0.999), "p99.9-ns")
			b.ReportMetric(float64(lat[len(lat)-1]), "max-ns")
			b.ReportMetric(float64(stalls), "stalls>100µs")
			b.ReportMetric(float64(rounds.Load()), "repl-rounds")
		})
	}
}

// BenchmarkAntiEntropy is one anti-entropy round of a node holding 100k
// keys of a global rule, encoded as the replicator sends it: the work (and
// the garbage) that competes with decisions every anti-entropy interval.
// In all-own every key is the node's own; in mostly-remote the node served
// 10k of them and learnt the rest from another PoP, as most of a fleet's
// nodes do, and the round is paced in parts as the replicator paces it.
//
//	go test ./pop -run '^$' -bench AntiEntropy -benchmem
func BenchmarkAntiEntropy(b *testing.B) {
	created, _ := ipv4Keys(benchKeys)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	b.Run("all-own", func(b *testing.B) {
		n := benchNode(b, created, now)
		n.Link().SetEpoch(1)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			bt := n.Link().AntiEntropy(now, nil)
			if len(bt.Local.Entries) != benchKeys || len(bt.PoP.Entries) != benchKeys {
				b.Fatalf("%d own and %d PoP entries of %d keys", len(bt.Local.Entries), len(bt.PoP.Entries), benchKeys)
			}
			for _, d := range []*wire.Delta{&bt.Local, &bt.PoP} {
				if _, err := wire.Encode(d, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("mostly-remote", func(b *testing.B) {
		const own = benchKeys / 10
		n, err := New(Config{
			Self:    identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
			Rules:   []Rule{{Name: "api", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal}},
			MaxKeys: 4 * benchKeys,
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range created[:own] {
			if _, err := n.Decide(now, "api", k, 1); err != nil {
				b.Fatal(err)
			}
		}
		n.Link().SetEpoch(1)
		w := now / int64(time.Minute)
		d := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 7)}
		for _, k := range created[own:] {
			d.Entries = append(d.Entries, crdt.Entry{Rule: "api", Key: k, Window: w, Count: 3})
		}
		if st := n.Link().Apply(now, &d, ScopeGlobal); st.Merged != len(d.Entries) {
			b.Fatalf("merged %d of %d", st.Merged, len(d.Entries))
		}
		parts := n.Link().AntiEntropyParts()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			local, pop := 0, 0
			for p := range features {
				bt := n.Link().AntiEntropyPart(now, nil, p, parts, false)
				local, pop = local+len(bt.Local.Entries), pop+len(bt.PoP.Entries)
				for _, d := range []*wire.Delta{&bt.Local, &bt.PoP} {
					if _, err := wire.Encode(d, 0); err != nil {
						b.Fatal(err)
					}
				}
			}
			if local != own || pop != own {
				b.Fatalf("%d own and %d PoP entries of %d own keys", local, pop, own)
			}
		}
	})
}
