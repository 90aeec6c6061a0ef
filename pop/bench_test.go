package pop

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/crdt"
)

// benchKeys returns n IPv4 keys in a seeded random order, so that requests
// do not arrive in the order the keys were created (they never do).
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

func benchNode(b *testing.B, keys []string, now int64) *Node {
	b.Helper()
	n, err := New(Config{
		Self:    crdt.Replica{Region: "eu", PoP: "ams", Node: "ams-1", Incarnation: 1},
		Rules:   []Rule{{Name: "api", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal}},
		MaxKeys: 4 * len(keys),
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

// BenchmarkDecide is a full decision as the daemon makes it: read the (coarse)
// clock, look up the rule and the key among 100k, decide, count.
func BenchmarkDecide(b *testing.B) {
	keys := benchKeys(benchN)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	n := benchNode(b, keys, clk.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMutexMap is the baseline of BenchmarkDecide: a mutex-guarded map of
// per-key counters with the same clock read, keys and lookups. (A map of
// x/time/rate limiters costs more; this is the floor of the naive design.)
func BenchmarkMutexMap(b *testing.B) {
	keys := benchKeys(benchN)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	type ctr struct {
		win   int64
		count uint64
	}
	var mu sync.Mutex
	m := make(map[string]*ctr, len(keys))
	for _, k := range keys {
		m[k] = &ctr{}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := clk.Now()
		mu.Lock()
		c := m[keys[i%len(keys)]]
		w := now / int64(time.Minute)
		if c.win != w {
			c.win, c.count = w, 0
		}
		if c.count < 1<<40 {
			c.count++
		}
		mu.Unlock()
	}
}

func BenchmarkDecideParallel(b *testing.B) {
	keys := benchKeys(benchN)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	n := benchNode(b, keys, clk.Now())
	b.ReportAllocs()
	b.ResetTimer()
	var seed sync.Mutex
	next := 0
	b.RunParallel(func(pb *testing.PB) {
		seed.Lock()
		i := next * 7919
		next++
		seed.Unlock()
		for pb.Next() {
			i++
			if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

var benchN = 100_000
