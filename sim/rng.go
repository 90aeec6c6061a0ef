package sim

import (
	"math/bits"
	"math/rand/v2"
)

// rng is a random stream on a PCG source: the draws of math/rand/v2's
// Rand, bit for bit, with the hot ones (Float64, IntN) called on the PCG
// directly rather than through the Source interface.
type rng struct {
	pcg *rand.PCG
	r   *rand.Rand // same source; for ExpFloat64
}

func newRNG(seed1, seed2 uint64) *rng {
	p := rand.NewPCG(seed1, seed2)
	return &rng{pcg: p, r: rand.New(p)}
}

// Float64 is rand.Rand.Float64.
func (g *rng) Float64() float64 { return float64(g.pcg.Uint64()<<11>>11) / (1 << 53) }

// IntN is rand.Rand.IntN (64-bit platforms).
func (g *rng) IntN(n int) int { return int(g.uint64n(uint64(n))) }

// Int64N is rand.Rand.Int64N (64-bit platforms).
func (g *rng) Int64N(n int64) int64 { return int64(g.uint64n(uint64(n))) }

// ExpFloat64 is rand.Rand.ExpFloat64.
func (g *rng) ExpFloat64() float64 { return g.r.ExpFloat64() }

func (g *rng) uint64n(n uint64) uint64 {
	if n&(n-1) == 0 {
		return g.pcg.Uint64() & (n - 1)
	}
	hi, lo := bits.Mul64(g.pcg.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(g.pcg.Uint64(), n)
		}
	}
	return hi
}
