package pop

import (
	"fmt"
	"testing"
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
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchGCRAInterleaved(b, keys, ScopePoP) })
	}
}
