package pop

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkFlushSparse flushes a node whose 10 000 keys of a global rule
// (limit 100 000 per minute) each changed by one since the last flush:
// publishing every change, and with sparse updates among 8 PoPs (a step of
// 3 125: nothing is published, each key is looked up in the table of totals
// published and its estimate peeked at).
func BenchmarkFlushSparse(b *testing.B) {
	const keys = 10000
	for _, bc := range []struct {
		name   string
		voices int
	}{{"every-change", 0}, {"sparse", 8}} {
		b.Run(bc.name, func(b *testing.B) {
			n, err := New(Config{Self: replica("a", 1), Rules: []Rule{
				{Name: "api", Limit: 100000, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
			}})
			if err != nil {
				b.Fatal(err)
			}
			n.Link().SetEpoch(1)
			n.Link().SetSparse(bc.voices, 50*time.Millisecond)
			names := make([]string, keys)
			for i := range names {
				names[i] = "k" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			entries := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				now := t0 + int64(i%1000)*int64(time.Millisecond)
				for _, k := range names {
					if _, err := n.Decide(now, "api", k, 1); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				entries += len(n.Link().FlushTo(now, nil, false).PoP.Entries)
			}
			b.ReportMetric(float64(entries)/float64(b.N), "entries/flush")
		})
	}
}
