package pop

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

const benchKeys = 100_000

// ipv4Keys returns n IPv4 keys in creation order, and the same keys in a
// seeded random order: requests never arrive in the order keys were created,
// so benchmarks access keys in the shuffled order.
func ipv4Keys(n int) (created, shuffled []string) {
	created = make([]string, n)
	for i := range created {
		created[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	shuffled = append([]string(nil), created...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	// The daemon decides on a key it has just parsed from a request buffer,
	// which is in cache. Lay the shuffled keys out back to back in one
	// buffer, read in order, rather than as strings scattered over the heap,
	// whose every read would be a cache miss the daemon never pays.
	var arena strings.Builder
	for _, k := range shuffled {
		arena.WriteString(k)
	}
	buf, off := arena.String(), 0
	for i, k := range shuffled {
		shuffled[i] = buf[off : off+len(k)]
		off += len(k)
	}
	return created, shuffled
}

func benchNode(b *testing.B, keys []string, now int64) *Node {
	return benchNodeSeeded(b, keys, now, 0)
}

// benchNodeSeeded is benchNode with a deterministic store (Config.Seed), as
// the simulator runs it.
func benchNodeSeeded(b *testing.B, keys []string, now int64, seed uint64) *Node {
	b.Helper()
	n, err := New(Config{
		Self:    identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
		Rules:   []Rule{{Name: "api", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal}},
		MaxKeys: 4 * len(keys),
		Seed:    seed,
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range keys {
		if _, err := n.Decide(now, "api", k, 1); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// BenchmarkDecide is a full decision as the daemon makes it: read the coarse
// clock, look up the rule and one of 100k keys, decide, count. The xrate-map
// sub-benchmark is the baseline in the same run: a mutex-guarded map of
// golang.org/x/time/rate limiters, the same clock read and the same keys.
func BenchmarkDecide(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	b.Run("geolimit", func(b *testing.B) {
		n := benchNode(b, created, clk.Now())
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("geolimit-calendar", func(b *testing.B) {
		// The same of a monthly calendar quota (calendar.go).
		benchDecideCalendar(b, created, keys, clk)
	})
	b.Run("geolimit-check", func(b *testing.B) {
		// The same through the pipeline's one-check call, as /v1/check
		// makes it.
		n := benchNode(b, created, clk.Now())
		h, _ := n.Handle("api")
		var res Result
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := n.DecideCheck(clk.Now(), Check{Rule: h, Key: keys[i%len(keys)], Cost: 1}, &res); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("geolimit-check-idempotent", func(b *testing.B) {
		// The same with an idempotency key per request: half are retries
		// of the request before, which count nothing.
		n := benchNode(b, created, clk.Now())
		h, _ := n.Handle("api")
		idems := make([]string, 1024)
		for j := range idems {
			idems[j] = "7c1f4a2e-5d7b-4f0e-9b1a-" + strconv.Itoa(100000000000+j)
		}
		var res Result
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := Check{Rule: h, Key: keys[(i/2)%len(keys)], Cost: 1, IdempotencyKey: idems[(i/2)%len(idems)]}
			if err := n.DecideCheck(clk.Now(), c, &res); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("geolimit-seeded", func(b *testing.B) {
		// The same with a seeded store (the simulator's): another key hash.
		n := benchNodeSeeded(b, created, clk.Now(), 1)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("geolimit-split", func(b *testing.B) {
		// The same with the near-limit allowance of a fleet of 40 nodes
		// on: far from their limit, keys pay the slot's test only.
		n := benchNode(b, created, clk.Now())
		n.Link().SetAllowance(ScopeGlobal, Allowance{Horizon: 200 * time.Millisecond, Members: 2, PoPs: 20})
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if hot := n.Stats().Store.HotKeys; hot != 0 {
			b.Fatalf("%d keys far from their limit took allowance state", hot)
		}
	})
	b.Run("geolimit-1k-keys", func(b *testing.B) {
		// The same on 1k keys, which stay in cache: the compute cost alone.
		small := created[:1000]
		n := benchNode(b, small, clk.Now())
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := n.Decide(clk.Now(), "api", small[i%len(small)], 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, chained := range []bool{false, true} {
		name := map[bool]string{false: "miss-overlapped", true: "miss-serialized"}[chained]
		b.Run(name, func(b *testing.B) {
			// Not a limiter: per call, the key's hash and one read of a
			// random cache line of a table as large as the store's, in the
			// same key order. Overlapped, the reads of successive calls
			// run side by side, as nothing orders them; serialized, each
			// read's address depends on the read before (its value, 0), as
			// a decision's lock orders its read of the slot before the
			// next decision's: the memory latency a locked decision on
			// 100k keys pays.
			n := benchNode(b, created, clk.Now())
			lines := uint64(n.Stats().Store.TableBytes / 64)
			table := make([]uint64, lines*8)
			for j := range table {
				table[j] = 0 // written, so that every page is a page of its own
			}
			seed := maphash.MakeSeed()
			var prev, sum uint64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h := maphash.String(seed, keys[i%len(keys)])
				if chained {
					h += prev
				}
				line, _ := bits.Mul64(h, lines) // h scaled to [0, lines): no division in the chain
				prev = table[line*8]
				sum += prev
			}
			b.StopTimer()
			if sum != 0 {
				b.Fatalf("read %d", sum)
			}
		})
	}
	for _, tc := range []struct {
		name            string
		created, access []string
	}{
		{"xrate-map", created, keys},
		// The same on 1k keys, which stay in cache: the baseline's compute
		// cost alone, beside geolimit-1k-keys.
		{"xrate-map-1k-keys", created[:1000], created[:1000]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var mu sync.Mutex
			m := make(map[string]*rate.Limiter, len(tc.created))
			for _, k := range tc.created {
				m[k] = rate.NewLimiter(rate.Limit(1<<40), 1<<40)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := time.Unix(0, clk.Now())
				mu.Lock()
				l := m[tc.access[i%len(tc.access)]]
				mu.Unlock()
				l.AllowN(t, 1)
			}
		})
	}
}

// BenchmarkDecideParallel is BenchmarkDecide from every core at once, on
// 100k keys and on 1k cache-resident keys; compare its ns/op with
// BenchmarkDecide's to see the scaling.
func BenchmarkDecideParallel(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	for _, tc := range []struct {
		name            string
		created, access []string
	}{
		{"100k-keys", created, keys},
		{"1k-keys", created[:1000], created[:1000]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := benchNode(b, tc.created, clk.Now())
			b.ReportAllocs()
			b.ResetTimer()
			var mu sync.Mutex
			next := 0
			b.RunParallel(func(pb *testing.PB) {
				mu.Lock()
				i := next * 7919
				next++
				mu.Unlock()
				for pb.Next() {
					i++
					if _, err := n.Decide(clk.Now(), "api", tc.access[i%len(tc.access)], 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkApply merges one delta batch of 100 entries from another PoP's
// aggregate into a node holding 100k keys; every batch raises the counts so
// each entry really merges. "hot" merges the same 100 keys every time (in
// cache); "spread" takes each batch's 100 keys from all 100k in random
// order, so that nearly every entry's slot is a cache miss, as in a node
// receiving a fleet's deltas.
func BenchmarkApply(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	w := now / int64(time.Minute)
	for _, spread := range []bool{false, true} {
		name := "hot"
		if spread {
			name = "spread"
		}
		b.Run(name, func(b *testing.B) {
			n := benchNode(b, created, now)
			d := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 7), Entries: make([]crdt.Entry, 100)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range d.Entries {
					k := j
					if spread {
						k = (i*100 + j) % len(keys)
					}
					d.Entries[j] = crdt.Entry{Rule: "api", Key: keys[k], Window: w, Count: uint64(i + 1)}
				}
				if st := n.Link().Apply(now, &d, ScopeGlobal); st.Merged != 100 {
					b.Fatalf("merged %d of 100", st.Merged)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/entry")
		})
	}
}

// BenchmarkMemoryPerKey stores 1M IPv4 keys with one replica and reports the
// memory they hold per key: heap, and the store's tables outside it.
func BenchmarkMemoryPerKey(b *testing.B) {
	created, _ := ipv4Keys(1_000_000)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		n := benchNode(b, created, now)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n.Stats().Store.Keys != len(created) {
			b.Fatal("keys missing")
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc+uint64(n.Stats().Store.OffHeapBytes))/float64(len(created)), "bytes/key")
		runtime.KeepAlive(n)
	}
}

// BenchmarkDecideBatch decides batches of 100 random keys of 100k, one by
// one as a batch endpoint does, with each check's key prefetched four
// checks ahead (PrefetchHandle) and without; ns/op is per decision.
func BenchmarkDecideBatch(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	const ahead = 4
	for _, prefetched := range []bool{false, true} {
		b.Run(map[bool]string{false: "one-by-one", true: "prefetched"}[prefetched], func(b *testing.B) {
			n := benchNode(b, created, clk.Now())
			h, ok := n.Handle("api")
			if !ok {
				b.Fatal("no rule api")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += 100 {
				batch := keys[i%len(keys) : i%len(keys)+min(100, len(keys)-i%len(keys))]
				if prefetched {
					for _, k := range batch[:min(ahead, len(batch))] {
						n.prefetchHandle(h, k)
					}
				}
				for j, k := range batch {
					if prefetched && j+ahead < len(batch) {
						n.prefetchHandle(h, batch[j+ahead])
					}
					if _, err := n.DecideHandle(clk.Now(), h, k, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
