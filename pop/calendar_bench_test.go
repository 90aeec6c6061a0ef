package pop

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/window"
)

// benchCalendarNode is benchNode with rule "api" a monthly calendar quota
// in a zone with daylight saving.
func benchCalendarNode(b *testing.B, keys []string, now int64) *Node {
	b.Helper()
	nyc, err := time.LoadLocation("America/New_York")
	if err != nil {
		b.Fatal(err)
	}
	c := window.Calendar{Period: window.Month, Location: nyc}
	n, err := New(Config{
		Self:    identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
		Rules:   []Rule{{Name: "api", Limit: 1 << 40, Window: time.Duration(c.Width()), Calendar: c, Cost: 1, Scope: ScopeGlobal}},
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

// benchDecideCalendar is BenchmarkDecide's geolimit-calendar: the same
// decision, keys and clock, of a calendar rule.
func benchDecideCalendar(b *testing.B, created, keys []string, clk *clock.Coarse) {
	n := benchCalendarNode(b, created, clk.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := n.Decide(clk.Now(), "api", keys[i%len(keys)], 1); err != nil {
			b.Fatal(err)
		}
	}
}
