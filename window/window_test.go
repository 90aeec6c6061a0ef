package window

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sec = int64(1e9)

func TestSplit(t *testing.T) {
	tests := []struct {
		name          string
		t, width      int64
		index, elapse int64
	}{
		{"epoch", 0, 60 * sec, 0, 0},
		{"inside first", 59 * sec, 60 * sec, 0, 59 * sec},
		{"boundary", 60 * sec, 60 * sec, 1, 0},
		{"just before boundary", 60*sec - 1, 60 * sec, 0, 60*sec - 1},
		{"before epoch", -1, 60 * sec, -1, 60*sec - 1},
		{"before epoch boundary", -60 * sec, 60 * sec, -1, 0},
		{"large", math.MaxInt64, sec, math.MaxInt64 / sec, math.MaxInt64 % sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, e := Split(tt.t, tt.width)
			assert.Equal(t, tt.index, i)
			assert.Equal(t, tt.elapse, e)
			assert.Equal(t, tt.t, Start(i, tt.width)+e)
		})
	}
}

func TestEstimate(t *testing.T) {
	tests := []struct {
		name           string
		prev, curr     uint64
		elapsed, width int64
		want           float64
	}{
		{"f=0 counts all of prev", 100, 10, 0, 60 * sec, 110},
		{"half", 100, 10, 30 * sec, 60 * sec, 60},
		{"f->1", 100, 10, 60*sec - 1, 60 * sec, 10 + 100*(1/(60*1e9))},
		{"negative elapsed clamps to f=0", 100, 0, -5, 60 * sec, 100},
		{"elapsed past width clamps to f=1", 100, 7, 90 * sec, 60 * sec, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, Estimate(tt.prev, tt.curr, tt.elapsed, tt.width), 1e-6)
		})
	}
}

func TestDecide(t *testing.T) {
	W := 60 * sec
	tests := []struct {
		name        string
		limit, cost uint64
		prev, curr  uint64
		elapsed     int64
		allowed     bool
		remaining   uint64
		retryAfter  int64 // -2: check by search instead
		reset       int64
	}{
		{"empty admits", 10, 1, 0, 0, 0, true, 9, 0, 2 * W},
		{"exactly at limit admits", 10, 1, 0, 9, 0, true, 0, 0, 2 * W},
		{"over limit denies, needs next window", 10, 1, 0, 10, 0, false, 0, -2, 2 * W},
		{"prev decays: half way", 10, 1, 10, 0, W / 2, true, 4, 0, 2*W - W/2},
		{"prev blocks at f=0", 10, 1, 10, 0, 0, false, 0, -2, W},
		{"cost over limit never fits", 10, 11, 0, 0, 0, false, 10, Never, 0},
		{"limit 0 admits nothing", 0, 1, 0, 0, 0, false, 0, Never, 0},
		{"huge counts do not overflow", math.MaxUint64, 1, math.MaxUint64, math.MaxUint64, W / 2, false, 0, -2, W + W/2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Decide(tt.limit, tt.cost, tt.prev, tt.curr, tt.elapsed, W)
			assert.Equal(t, tt.allowed, r.Allowed)
			assert.Equal(t, tt.remaining, r.Remaining)
			assert.Equal(t, tt.reset, r.Reset)
			switch {
			case tt.allowed:
				assert.Zero(t, r.RetryAfter)
			case tt.retryAfter != -2:
				assert.Equal(t, tt.retryAfter, r.RetryAfter)
			default:
				checkRetryAfter(t, tt.limit, tt.cost, tt.prev, tt.curr, tt.elapsed, W, r.RetryAfter)
			}
		})
	}
}

// fitsAt reports whether the request fits d nanoseconds after elapsed, with
// no other arrivals, evaluating the sliding estimate across the boundary.
func fitsAt(limit, cost, prev, curr uint64, elapsed, width, d int64) bool {
	t := elapsed + d
	switch {
	case t < width:
		return Estimate(prev, curr, t, width)+float64(cost) <= float64(limit)
	case t < 2*width:
		return Estimate(curr, 0, t-width, width)+float64(cost) <= float64(limit)
	}
	return float64(cost) <= float64(limit)
}

func checkRetryAfter(t *testing.T, limit, cost, prev, curr uint64, elapsed, width, got int64) {
	t.Helper()
	require.Greater(t, got, int64(0))
	assert.True(t, fitsAt(limit, cost, prev, curr, elapsed, width, got), "must fit after retry_after=%d", got)
	// Exact: a microsecond earlier it must not fit yet (unless rounding is within 1us).
	if got > 1000 {
		assert.False(t, fitsAt(limit, cost, prev, curr, elapsed, width, got-1000), "fits 1us before retry_after=%d", got)
	}
}

func TestRetryAfterExactProperty(t *testing.T) {
	W := 10 * sec
	for limit := uint64(1); limit <= 40; limit += 3 {
		for prev := uint64(0); prev <= 50; prev += 7 {
			for curr := uint64(0); curr <= 50; curr += 5 {
				for _, el := range []int64{0, 1, W / 3, W / 2, W - 1} {
					for _, cost := range []uint64{1, 2, limit} {
						if cost > limit {
							continue
						}
						got := RetryAfter(limit, cost, prev, curr, el, W)
						if fitsAt(limit, cost, prev, curr, el, W, 0) {
							assert.Zero(t, got)
							continue
						}
						checkRetryAfter(t, limit, cost, prev, curr, el, W, got)
					}
				}
			}
		}
	}
}

func TestRetryAfterCrossesIntoNextWindow(t *testing.T) {
	W := 10 * sec
	// curr alone exceeds limit-cost: must wait until next window, then for curr to decay.
	got := RetryAfter(10, 1, 0, 20, W/2, W)
	// Next window starts in W/2; need 20*(1-g) <= 9 => g >= 0.55.
	assert.InDelta(t, float64(W/2+W*55/100), float64(got), 2)
}

func TestSatAdd(t *testing.T) {
	assert.Equal(t, uint64(3), SatAdd(1, 2))
	assert.Equal(t, uint64(math.MaxUint64), SatAdd(math.MaxUint64, 1))
	assert.Equal(t, uint64(math.MaxUint64), SatAdd(math.MaxUint64-1, math.MaxUint64-1))
}

func BenchmarkDecide(b *testing.B) {
	b.ReportAllocs()
	var sink uint64
	for i := 0; i < b.N; i++ {
		r := Decide(1000, 1, uint64(i&1023), 300, int64(i&0xffffff), 60*sec)
		sink += r.Remaining
	}
	_ = sink
}
