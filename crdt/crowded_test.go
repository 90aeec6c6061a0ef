package crdt

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A crowded key's turns are drawn at one over twice a replica's chance of a
// request in a horizon-long period, within [crowdedTurns, maxCrowdedTurns],
// read from its admits and denials over the trailing window.
func TestCrowdedDraw(t *testing.T) {
	const hw = 0.02 // a 200 ms horizon over a 10 s window
	chance := func(perWindow float64) float64 { return -math.Expm1(-perWindow * hw) }
	for _, tc := range []struct {
		name string
		e    *hotEntry
		own  [2]uint64
		f    float64
		want float64
	}{
		{"no hot entry", nil, [2]uint64{5, 3}, 0.5, crowdedTurns},
		{"denials not counted in the window", &hotEntry{dfrom: 101, dwin: 100}, [2]uint64{5, 3}, 0.5, crowdedTurns},
		// 6 asked a window (5 admitted, 1 denied of the previous window at
		// half of it, 2 and 1 of this one): a request in one period in nine.
		{"a request in one period of nine", &hotEntry{dfrom: 99, dwin: 100, dcost: [2]uint64{1, 1}}, [2]uint64{5, 2}, 0.5, 1 / (2 * chance(6))},
		{"a request in most periods", &hotEntry{dfrom: 99, dwin: 100, dcost: [2]uint64{20, 20}}, [2]uint64{30, 10}, 0.5, crowdedTurns},
		{"a request in few periods", &hotEntry{dfrom: 99, dwin: 100}, [2]uint64{0, 0x1}, 0.9, maxCrowdedTurns},
		// Only this window counted, a tenth of it passed: too short to read.
		{"too little of the window read", &hotEntry{dfrom: 100, dwin: 100, dcost: [2]uint64{0, 1}}, [2]uint64{0, 1}, 0.1, crowdedTurns},
		// Only this window counted, half of it: 3 asked there, 6 a window.
		{"this window alone", &hotEntry{dfrom: 100, dwin: 100, dcost: [2]uint64{0, 1}}, [2]uint64{9, 2}, 0.5, 1 / (2 * chance(6))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl := &slot{win: 100, own: tc.own}
			assert.InDelta(t, tc.want, crowdedDraw(tc.e, sl, tc.f, hw), 1e-9)
		})
	}
}
