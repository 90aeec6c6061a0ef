package modes

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/require"
)

// TestMergeRuleModeLaws checks last writer wins against a reference (the
// newest write by (At, By, Mode)) and the merge laws, on seeded random
// writes, some with equal times.
func TestMergeRuleModeLaws(t *testing.T) {
	seed := uint64(7)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 2000; i++ {
		ms := sampleModes(rng, 3)
		for j := range ms {
			ms[j].Rule = "api" // writes of one register
		}
		if rng.IntN(2) == 0 {
			ms[1].At = ms[0].At // ties are broken by the writer, then the mode
		}
		a, b, c := ms[0], ms[1], ms[2]
		require.Equal(t, Merge(a, b), Merge(b, a), "commutative (seed %d)", seed)
		require.Equal(t, Merge(Merge(a, b), c), Merge(a, Merge(b, c)), "associative (seed %d)", seed)
		require.Equal(t, a, Merge(a, a), "idempotent")
		want := a
		for _, m := range ms[1:] {
			if m.At > want.At || (m.At == want.At && (m.By.String() > want.By.String() ||
				(m.By == want.By && m.Mode > want.Mode))) {
				want = m
			}
		}
		// The reference compares writers as strings; the names here make
		// that the same order as identity.CompareReplicas.
		require.Equal(t, want, Merge(Merge(a, b), c), "newest wins (seed %d)", seed)
	}
}

func sampleModes(rng *rand.Rand, n int) []RuleMode {
	rules := []string{"api", "login", "per-ip"}
	out := make([]RuleMode, 0, n)
	for range n {
		out = append(out, RuleMode{
			Rule: rules[rng.IntN(len(rules))],
			Mode: uint8(rng.IntN(int(maxMode) + 1)),
			At:   1_700_000_000_000_000_000 + rng.Int64N(1e12),
			By:   identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n" + strconv.Itoa(rng.IntN(3)), Incarnation: rng.Uint64N(4) + 1},
		})
	}
	return out
}
