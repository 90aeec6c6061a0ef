package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/identity"
)

// BenchmarkDecideWindows is Decide on rules of several windows, overrides
// and tiers (limits.go), 1k keys (in cache: the compute cost), next to the
// same keys on a rule of one window.
func BenchmarkDecideWindows(b *testing.B) {
	created, _ := ipv4Keys(1000)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	over := make([]Override, 1000)
	for i := range over {
		over[i] = Override{Key: "cust-" + strconv.Itoa(i), Limits: []Limit{{Limit: 1 << 41, Window: time.Minute}}}
	}
	rules := []Rule{
		{Name: "one", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
		{Name: "two", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, More: []Limit{{Limit: 1 << 41, Window: time.Hour}}},
		{Name: "overrides", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, Overrides: over},
		{Name: "tiers", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal,
			Tiers: map[string][]Limit{"free": {{Limit: 1 << 39, Window: time.Minute}}, "pro": {{Limit: 1 << 41, Window: time.Minute}}}},
	}
	n, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, Rules: rules, MaxKeys: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, rule, tier string }{{"one", "one", ""}, {"two-windows", "two", ""}, {"overrides", "overrides", ""}, {"tier", "tiers", "pro"}} {
		b.Run(tc.name, func(b *testing.B) {
			o := Options{Tier: tc.tier}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := n.DecideWith(clk.Now(), tc.rule, created[i%len(created)], 1, o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
