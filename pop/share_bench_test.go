package pop

import (
	"testing"
	"time"
)

// benchShare decides on 1 000 keys of a share rule (limit 100 in 10 s
// windows) with a history window seen whole, then a cut; healed, it
// decides after the heal's hold, in the window the hold ends in, of a cut
// whose share denied a request.
func benchShare(b *testing.B, healed bool) {
	eu, us := pairNodes(b, Rule{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share})
	keys, _ := ipv4Keys(1000)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	for i, k := range keys {
		now := start + int64(i)*W/int64(len(keys))
		_, _ = eu.Decide(now, "api", k, 1)
		_, _ = us.Decide(now, "api", k, 1)
	}
	out := us.Link().Flush(start+W-1, nil)
	eu.Link().Apply(start+W-1, &out.PoP, ScopeGlobal)
	cut := start + W + W/10
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	now := cut
	if healed {
		// One key past its share in the cut: a cut whose share denied
		// a request holds its keys to the heal window's bounds.
		for range 60 {
			_, _ = eu.Decide(cut, "api", keys[0], 1)
		}
		eu.Link().SetUnheard(cut+W/10, nil)
		now = cut + W/10 + int64(DefaultHealHold)
	}
	step := W / 4 / int64(max(b.N, 1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, _ = eu.Decide(now+int64(i)*step, "api", keys[i%len(keys)], 1)
	}
}

func BenchmarkDecideShareCut(b *testing.B)        { benchShare(b, false) }
func BenchmarkDecideShareHealWindow(b *testing.B) { benchShare(b, true) }
