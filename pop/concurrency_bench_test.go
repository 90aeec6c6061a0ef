package pop

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkConcurrency acquires a slot and gives it back, as proxy mode
// does around each request: through DecideCheck alone, and all or nothing
// beside a rate rule's check.
func BenchmarkConcurrency(b *testing.B) {
	rules := []Rule{
		{Name: "conc", Kind: Concurrency, Limit: 100, Cost: 1, Scope: ScopePoP},
		{Name: "api", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
	}
	n, err := New(Config{Self: replica("a", 1), Rules: rules})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "10.0.0." + strconv.Itoa(i)
	}
	conc, _ := n.Handle("conc")
	api, _ := n.Handle("api")
	now := t0
	b.Run("acquire-release", func(b *testing.B) {
		var res Result
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := n.DecideCheck(now, Check{Rule: conc, Key: keys[i%len(keys)], Pin: true}, &res); err != nil || !res.Allowed {
				b.Fatal(err, res.Allowed)
			}
			n.Release(now, res.Lease.ID())
		}
	})
	b.Run("with-rate-rule", func(b *testing.B) {
		res := make([]Result, 2)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			k := keys[i%len(keys)]
			req := Request{Combine: All, Checks: []Check{{Rule: conc, Key: k, Pin: true}, {Rule: api, Key: k}}}
			if out, err := n.DecideChecks(now, &req, res); err != nil || !out.Allowed {
				b.Fatal(err, out.Allowed)
			}
			n.ReleaseResults(now, res)
		}
	})
}

// BenchmarkConcurrencyParallel is acquire-release from every core at
// once, on distinct keys: the slot table's one lock is shared.
func BenchmarkConcurrencyParallel(b *testing.B) {
	rules := []Rule{{Name: "conc", Kind: Concurrency, Limit: 100, Cost: 1, Scope: ScopePoP}}
	n, err := New(Config{Self: replica("a", 1), Rules: rules})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	conc, _ := n.Handle("conc")
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 997
		var res Result
		for pb.Next() {
			i++
			if err := n.DecideCheck(t0, Check{Rule: conc, Key: keys[i%len(keys)], Pin: true}, &res); err != nil || !res.Allowed {
				b.Fatal(err, res.Allowed)
			}
			n.Release(t0, res.Lease.ID())
		}
	})
}
