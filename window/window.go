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
	f := fraction(elapsed, width)
	return float64(prev)*(1-f) + float64(curr)
}

func fraction(elapsed, width int64) float64 {
	switch {
	case elapsed <= 0 || width <= 0:
		return 0
	case elapsed >= width:
		return 1
	}
	return float64(elapsed) / float64(width)
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
	if elapsed < 0 {
		elapsed = 0
	}
	if elapsed > width {
		elapsed = width
	}
	est := Estimate(prev, curr, elapsed, width)
	lim := float64(limit)
	c := float64(cost)
	r := Result{Estimate: est}
	if est+c <= lim {
		r.Allowed = true
		r.Remaining = floorNonNeg(lim - est - c)
		r.Reset = resetAfter(prev, satAdd(curr, cost), elapsed, width)
		return r
	}
	r.Remaining = floorNonNeg(lim - est)
	r.RetryAfter = RetryAfter(limit, cost, prev, curr, elapsed, width)
	r.Reset = resetAfter(prev, curr, elapsed, width)
	return r
}

// RetryAfter returns the nanoseconds from elapsed until est + cost <= limit,
// assuming no other request arrives: 0 if it fits now, Never if cost > limit.
// The answer may lie in the next window, once the current one has become the
// previous one and decays.
func RetryAfter(limit, cost, prev, curr uint64, elapsed, width int64) int64 {
	if cost > limit {
		return Never
	}
	if elapsed < 0 {
		elapsed = 0
	}
	if elapsed > width {
		elapsed = width
	}
	lim, c := float64(limit), float64(cost)
	if Estimate(prev, curr, elapsed, width)+c <= lim {
		return 0
	}
	w := float64(width)
	room := lim - c // >= 0
	if float64(curr) <= room {
		// Fits inside this window once prev has decayed enough:
		// prev*(1-f) <= room - curr  <=>  f >= 1 - (room-curr)/prev.
		f := 1 - (room-float64(curr))/float64(prev)
		d := ceilNanos(f*w) - elapsed
		return fixUp(d, func(d int64) bool {
			return Estimate(prev, curr, elapsed+d, width)+c <= lim
		})
	}
	// Needs the next window: curr*(1-g) <= room  <=>  g >= 1 - room/curr.
	g := 1 - room/float64(curr)
	d := (width - elapsed) + ceilNanos(g*w)
	return fixUp(d, func(d int64) bool {
		e := elapsed + d - width
		if e < 0 {
			return false
		}
		return Estimate(curr, 0, e, width)+c <= lim
	})
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

// fixUp nudges d forward by whole nanoseconds until fits(d) holds, absorbing
// floating-point rounding; it gives up after a few steps (the error is at most
// a few ulps).
func fixUp(d int64, fits func(int64) bool) int64 {
	if d < 0 {
		d = 0
	}
	for i := 0; i < 4 && !fits(d); i++ {
		d++
	}
	return d
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
