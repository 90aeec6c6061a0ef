package pop

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/identity"
)

// BenchmarkDecideGuarded is BenchmarkDecide's geolimit case with the guards
// on (block_for and on_unsure: deny, no key blocked): the block lookup and
// the sync check per decision. "plain" is the same rule without them, in the
// same run.
func BenchmarkDecideGuarded(b *testing.B) {
	created, keys := ipv4Keys(benchKeys)
	clk := clock.NewCoarse(time.Millisecond)
	defer clk.Stop()
	for _, c := range []struct {
		name string
		rule Rule
	}{
		{"plain", Rule{Name: "api", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal}},
		{"guarded", Rule{Name: "api", Limit: 1 << 40, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, BlockFor: time.Minute, OnUnsure: DenyUnsure}},
	} {
		b.Run(c.name, func(b *testing.B) {
			n, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, Rules: []Rule{c.rule}, MaxKeys: 4 * len(created)})
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range created {
				if _, err := n.Decide(clk.Now(), "api", k, 1); err != nil {
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
