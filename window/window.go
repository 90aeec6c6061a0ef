// Package window implements the epoch-aligned sliding-window counter maths that
// every geolimit decision is made with.
//
// Time is a parameter: the package never reads the clock, starts no goroutine and
// keeps no state. Windows are fixed, epoch-aligned intervals of width W; the index
// of the window holding instant t (Unix nanoseconds) is floor(t / W). Inside
// window w, at elapsed fraction f, the sliding estimate of the trailing window is
//
//	est = total(w-1) * (1 - f) + total(w)
//
// and a request of cost c fits when est + c <= limit.
//
//	idx, elapsed := window.Split(now, width)
//	r := window.Decide(limit, cost, prev, curr, elapsed, width)
//	if r.Allowed { /* add cost to window idx */ }
//
// All functions are safe for concurrent use (they are pure).
package window

import "math"

// Never is returned as RetryAfter when a request can never fit: its cost is
// larger than the limit (a limit of zero admits nothing).
const Never int64 = -1

// Split returns the index of the window of width nanoseconds that holds the
// instant t (Unix nanoseconds) and the nanoseconds elapsed since that window
// began. Both are floor-based, so instants before the epoch work too:
// 0 <= elapsed < width always holds. width must be positive.
func Split(t, width int64) (index, elapsed int64) {
	index = t / width
	elapsed = t - index*width
	if elapsed < 0 {
		index--
		elapsed += width
	}
	return index, elapsed
}

// Start returns the Unix nanosecond instant at which window index begins.
func Start(index, width int64) int64 { return index * width }

// Estimate returns the sliding-window estimate prev*(1-f) + curr at elapsed
// nanoseconds into the current window. elapsed is clamped to [0, width], so a
// caller whose clock went backwards gets the most conservative estimate.
func Estimate(prev, curr uint64, elapsed, width int64) float64 {
	return estimate(float64(prev), float64(curr), elapsed, 1/float64(width))
}

// estimate is Estimate with the counts as floats and 1/width precomputed;
// every function here goes through it so that they all agree to the ulp.
func estimate(prev, curr float64, elapsed int64, invWidth float64) float64 {
	f := float64(elapsed) * invWidth
	switch {
	case f <= 0:
		f = 0
	case f >= 1:
		f = 1
	}
	return prev*(1-f) + curr
}

// Result is the outcome of Decide. Durations are nanoseconds.
type Result struct {
	// Allowed reports whether est + cost <= limit.
	Allowed bool
	// Estimate is the sliding estimate before this request.
	Estimate float64
	// Remaining is floor(limit - est - cost) when allowed, and floor(limit - est)
	// (what a smaller request could still use) when denied; never negative.
	Remaining uint64
	// RetryAfter is 0 when allowed; otherwise the exact time until a request of
	// the same cost would fit if no other request arrives, or Never.
	RetryAfter int64
	// Reset is the time until the estimate falls to zero if no other request
	// arrives (the whole limit is available again). It counts this request
	// when it is allowed.
	Reset int64
}

// Decide evaluates a request of cost against limit, given the totals of the
// previous and current windows and the nanoseconds elapsed in the current
// window of width nanoseconds. It does not count anything: the caller adds cost
// to the current window when Allowed.
func Decide(limit, cost, prev, curr uint64, elapsed, width int64) Result {
	var r Result
	DecideTo(&r, limit, cost, prev, curr, elapsed, width)
	return r
}

// DecideTo is Decide writing its result to *r. On a hot path it saves the
// copy of a returned Result, whose narrow stores a wide copy reads back
// before they have left the store buffer.
func DecideTo(r *Result, limit, cost, prev, curr uint64, elapsed, width int64) {
	elapsed = min(max(elapsed, 0), width)
	inv := 1 / float64(width)
	p, c := float64(prev), float64(curr)
	est := estimate(p, c, elapsed, inv)
	lim, fc := float64(limit), float64(cost)
	r.Estimate = est
	if est+fc <= lim {
		r.Allowed = true
		r.Remaining = floorNonNeg(lim - est - fc)
		r.RetryAfter = 0
		r.Reset = resetAfter(prev, satAdd(curr, cost), elapsed, width)
		return
	}
	r.Allowed = false
	r.Remaining = floorNonNeg(lim - est)
	r.RetryAfter = retryAfter(lim, fc, p, c, elapsed, width, inv)
	if cost > limit {
		r.RetryAfter = Never
	}
	r.Reset = resetAfter(prev, curr, elapsed, width)
}

// RetryAfter returns the nanoseconds from elapsed until est + cost <= limit,
// assuming no other request arrives: 0 if it fits now, Never if cost > limit.
// The answer may lie in the next window, once the current one has become the
// previous one and decays.
func RetryAfter(limit, cost, prev, curr uint64, elapsed, width int64) int64 {
	if cost > limit {
		return Never
	}
	elapsed = min(max(elapsed, 0), width)
	inv := 1 / float64(width)
	lim, fc, p, c := float64(limit), float64(cost), float64(prev), float64(curr)
	if estimate(p, c, elapsed, inv)+fc <= lim {
		return 0
	}
	return retryAfter(lim, fc, p, c, elapsed, width, inv)
}

// retryAfter is RetryAfter for a request that does not fit now (requires
// cost <= limit for a finite answer).
func retryAfter(lim, cost, prev, curr float64, elapsed, width int64, inv float64) int64 {
	room := lim - cost
	if room < 0 {
		return Never
	}
	w := float64(width)
	if curr <= room {
		// Fits inside this window once prev has decayed enough:
		// prev*(1-f) <= room - curr  <=>  f >= 1 - (room-curr)/prev.
		d := max(ceilNanos((1-(room-curr)/prev)*w)-elapsed, 0)
		for i := 0; i < 4 && estimate(prev, curr, elapsed+d, inv)+cost > lim; i++ {
			d++ // absorb floating-point rounding
		}
		return d
	}
	// Needs the next window: curr*(1-g) <= room  <=>  g >= 1 - room/curr.
	g := ceilNanos((1 - room/curr) * w)
	for i := 0; i < 4 && estimate(curr, 0, g, inv)+cost > lim; i++ {
		g++
	}
	return (width - elapsed) + g
}

// resetAfter returns the time until the estimate reaches zero.
func resetAfter(prev, curr uint64, elapsed, width int64) int64 {
	switch {
	case curr > 0:
		return 2*width - elapsed
	case prev > 0:
		return width - elapsed
	}
	return 0
}

func ceilNanos(x float64) int64 {
	if x >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(math.Ceil(x))
}

func floorNonNeg(x float64) uint64 {
	if x <= 0 {
		return 0
	}
	if x >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(x)
}

func satAdd(a, b uint64) uint64 {
	s := a + b
	if s < a {
		return math.MaxUint64
	}
	return s
}

// SatAdd returns a+b, saturating at the largest uint64 instead of wrapping.
func SatAdd(a, b uint64) uint64 { return satAdd(a, b) }
