package gcra

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name         string
		limit        uint64
		window       time.Duration
		burst        uint64
		interval     int64
		tolerance    int64
		zeroRateWant bool
	}{
		{name: "exact", limit: 100, window: time.Minute, burst: 100, interval: int64(600 * time.Millisecond), tolerance: int64(time.Minute)},
		{name: "rounded up", limit: 3, window: time.Second, burst: 3, interval: 333333334, tolerance: 1000000002},
		{name: "burst one", limit: 10, window: time.Second, burst: 1, interval: int64(100 * time.Millisecond), tolerance: int64(100 * time.Millisecond)},
		{name: "zero limit", limit: 0, window: time.Second, burst: 1, zeroRateWant: true},
		{name: "zero burst", limit: 1, window: time.Second, burst: 0, zeroRateWant: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Of(tc.limit, int64(tc.window), tc.burst)
			if tc.zeroRateWant {
				assert.Equal(t, Rate{}, r)
				var res Result
				r.Decide(&res, 0, 5, 1)
				assert.False(t, res.Allowed)
				assert.Equal(t, Never, res.RetryAfter)
				return
			}
			assert.Equal(t, tc.interval, r.Interval)
			assert.Equal(t, tc.tolerance, r.Tolerance())
		})
	}
}

func TestDecide(t *testing.T) {
	r := Of(10, int64(time.Second), 3) // one every 100ms, 3 at once
	ms := int64(time.Millisecond)
	now := int64(1_000_000) * ms
	type step struct {
		at        int64 // ms after now
		cost      uint64
		allowed   bool
		remaining uint64
		retry     int64 // ms
		reset     int64 // ms
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "burst then paced", steps: []step{
			{at: 0, cost: 1, allowed: true, remaining: 2, reset: 100},
			{at: 0, cost: 1, allowed: true, remaining: 1, reset: 200},
			{at: 0, cost: 1, allowed: true, remaining: 0, reset: 300},
			{at: 0, cost: 1, allowed: false, remaining: 0, retry: 100, reset: 300},
			{at: 50, cost: 1, allowed: false, remaining: 0, retry: 50, reset: 250},
			{at: 100, cost: 1, allowed: true, remaining: 0, reset: 300},
			{at: 450, cost: 1, allowed: true, remaining: 2, reset: 100},
		}},
		{name: "costly request", steps: []step{
			{at: 0, cost: 2, allowed: true, remaining: 1, reset: 200},
			{at: 0, cost: 2, allowed: false, remaining: 1, retry: 100, reset: 200},
			{at: 100, cost: 2, allowed: true, remaining: 0, reset: 300},
		}},
		{name: "cost over burst", steps: []step{
			{at: 0, cost: 4, allowed: false, remaining: 3, retry: -1, reset: 0},
		}},
		{name: "clock backwards is stricter", steps: []step{
			{at: 1000, cost: 3, allowed: true, remaining: 0, reset: 300},
			{at: 900, cost: 1, allowed: false, remaining: 0, retry: 200, reset: 400},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tat := int64(0)
			for i, s := range tc.steps {
				var res Result
				at := now + s.at*ms
				r.Decide(&res, tat, at, s.cost)
				assert.Equal(t, s.allowed, res.Allowed, "step %d", i)
				assert.Equal(t, s.remaining, res.Remaining, "step %d remaining", i)
				if s.retry == -1 {
					assert.Equal(t, Never, res.RetryAfter, "step %d retry", i)
				} else {
					assert.Equal(t, s.retry*ms, res.RetryAfter, "step %d retry", i)
				}
				assert.Equal(t, s.reset*ms, res.Reset, "step %d reset", i)
				if res.Allowed {
					tat = res.TAT
				}
			}
		})
	}
}

// TestRetryAfterIsExact: a denied request retried exactly RetryAfter later
// is admitted, and one nanosecond earlier is not.
func TestRetryAfterIsExact(t *testing.T) {
	seed := uint64(20261126)
	rng := rand.New(rand.NewPCG(seed, 7))
	for range 2000 {
		r := Of(1+rng.Uint64N(1000), int64(time.Millisecond)*(1+rng.Int64N(60_000)), 0)
		r.Burst = 1 + rng.Uint64N(50)
		if r.Interval < 1000 {
			continue
		}
		now := rng.Int64N(1 << 60)
		tat := now + rng.Int64N(r.Tolerance()+1)
		cost := 1 + rng.Uint64N(r.Burst)
		var res Result
		r.Decide(&res, tat, now, cost)
		if res.Allowed {
			continue
		}
		var again, early Result
		r.Decide(&again, tat, now+res.RetryAfter, cost)
		r.Decide(&early, tat, now+res.RetryAfter-1, cost)
		require.True(t, again.Allowed, "seed %d", seed)
		require.False(t, early.Allowed, "seed %d", seed)
	}
}

// TestNeverMoreThanTheRate: in any interval of length d, a key is admitted
// at most Burst + d/Interval units (the bound GCRA promises), whatever the
// arrivals, against a log of every admission.
func TestNeverMoreThanTheRate(t *testing.T) {
	seed := uint64(20261126)
	rng := rand.New(rand.NewPCG(seed, 11))
	for run := range 50 {
		r := Of(1+rng.Uint64N(20), int64(time.Second), 1+rng.Uint64N(10))
		type admit struct {
			at   int64
			cost uint64
		}
		var log []admit
		tat, now := int64(0), int64(1)<<40
		for range 500 {
			now += rng.Int64N(2 * r.Interval)
			cost := 1 + rng.Uint64N(r.Burst)
			var res Result
			r.Decide(&res, tat, now, cost)
			if res.Allowed {
				tat = res.TAT
				log = append(log, admit{now, cost})
			}
		}
		for i := range log {
			sum := uint64(0)
			for j := i; j < len(log); j++ {
				sum += log[j].cost
				d := log[j].at - log[i].at
				bound := r.Burst + uint64(d/r.Interval)
				require.LessOrEqual(t, sum, bound, "seed %d run %d: %d admitted in %dns", seed, run, sum, d)
			}
		}
	}
}

func TestSaturation(t *testing.T) {
	assert.Equal(t, int64(math.MaxInt64), Rate{Interval: math.MaxInt64 / 2, Burst: 4}.Tolerance())
	r := Rate{Interval: math.MaxInt64 / 8, Burst: 4}
	var res Result
	r.Decide(&res, math.MaxInt64-10, 0, 1)
	assert.False(t, res.Allowed)
	assert.GreaterOrEqual(t, res.RetryAfter, int64(0))
}

func BenchmarkDecide(b *testing.B) {
	r := Of(100, int64(time.Minute), 100)
	var res Result
	tat := int64(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Decide(&res, tat, int64(i)*int64(time.Millisecond), 1)
		if res.Allowed {
			tat = res.TAT
		}
	}
}
