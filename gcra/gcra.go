// Package gcra implements the generic cell rate algorithm: a pace of one
// unit of cost every Interval nanoseconds, of which up to Burst units may
// arrive at once, kept as one number per key, the theoretical arrival time
// (TAT): the instant at which the key would be back to a full burst if
// nothing more arrived.
//
// Time is a parameter: the package never reads the clock, starts no
// goroutine and keeps no state. A request of cost c at now is admitted when
//
//	max(tat, now) + c*Interval - now <= Burst*Interval
//
// and the key's TAT becomes max(tat, now) + c*Interval. This is a token
// bucket of Burst units refilled at one unit per Interval, kept as a time
// instead of a level, so nothing needs to run while a key is idle.
//
//	r := gcra.Of(100, int64(time.Minute), 10) // 100/min, 10 at once
//	var res gcra.Result
//	r.Decide(&res, tat, now, 1)
//	if res.Allowed { tat = res.TAT }
//
// All functions are safe for concurrent use (they are pure).
package gcra

import (
	"math"
	"math/bits"
)

// Never is returned as RetryAfter when a request can never be admitted: its
// cost is larger than the burst.
const Never int64 = -1

// Rate is a pace: one unit of cost every Interval nanoseconds, with up to
// Burst units at once. The zero value admits nothing.
type Rate struct {
	// Interval is the emission interval, in nanoseconds per unit of cost.
	Interval int64
	// Burst is the most cost admitted at once by a key idle long enough.
	Burst uint64
}

// Of returns the rate of limit units per window nanoseconds with burst:
// its Interval is window/limit rounded up to a whole nanosecond, so the
// pace is never faster than limit per window (slower by less than one part
// in Interval). limit, window and burst must be positive, and
// burst*Interval must not overflow an int64 (Of saturates it).
func Of(limit uint64, window int64, burst uint64) Rate {
	if limit == 0 || window <= 0 || burst == 0 {
		return Rate{}
	}
	q, r := uint64(window)/limit, uint64(window)%limit
	if r != 0 {
		q++
	}
	return Rate{Interval: int64(q), Burst: burst}
}

// Tolerance is how far ahead of now a key's TAT may be after an admission:
// Burst*Interval nanoseconds, the time a key takes to earn a full burst back.
func (r Rate) Tolerance() int64 { return mulSat(r.Burst, r.Interval) }

// Cost returns the nanoseconds a request of cost spends: cost*Interval,
// saturating.
func (r Rate) Cost(cost uint64) int64 { return mulSat(cost, r.Interval) }

// Result is the outcome of Decide. Durations are nanoseconds.
type Result struct {
	// Allowed reports whether the request fits.
	Allowed bool
	// TAT is the key's theoretical arrival time after the decision: the new
	// one when allowed; when denied, the former one (at least now), which
	// the caller need not store.
	TAT int64
	// Remaining is how many units of cost could still be admitted at now
	// after this decision (a request of cost 1 each): floor((Tolerance -
	// (TAT - now)) / Interval), never negative.
	Remaining uint64
	// RetryAfter is 0 when allowed; otherwise the exact time until a
	// request of the same cost fits if no other request arrives, or Never.
	RetryAfter int64
	// Reset is the time until the key is back to a full burst if no other
	// request arrives: TAT - now.
	Reset int64
}

// Decide evaluates a request of cost at now for a key whose TAT is tat (any
// value at or before now for a key never seen or idle long enough), into
// *res. It stores nothing: the caller keeps res.TAT when res.Allowed. A
// clock that went backwards (now before the time tat was computed at) only
// makes the decision stricter.
func (r Rate) Decide(res *Result, tat, now int64, cost uint64) {
	if r.Interval <= 0 || r.Burst == 0 {
		*res = Result{TAT: max(tat, now), RetryAfter: Never}
		return
	}
	tol := r.Tolerance()
	t := max(tat, now)
	debt := satSub(t, now)
	next := satAddInt(t, r.Cost(cost))
	if cost <= r.Burst && satSub(next, now) <= tol {
		res.Allowed = true
		res.TAT = next
		res.Reset = satSub(next, now)
		res.Remaining = uint64((tol - res.Reset) / r.Interval)
		res.RetryAfter = 0
		return
	}
	res.Allowed = false
	res.TAT = t
	res.Reset = debt
	if debt < tol {
		res.Remaining = uint64((tol - debt) / r.Interval)
	} else {
		res.Remaining = 0
	}
	if cost > r.Burst {
		res.RetryAfter = Never
		return
	}
	res.RetryAfter = satSub(next, now) - tol
}

// Pace decides a request of cost at now for a key whose TAT is tat, as
// Decide does, returning only the key's TAT after it and whether it is
// admitted (what a store of TATs keeps; crdt.Pacer).
func (r Rate) Pace(tat, now int64, cost uint64) (int64, bool) {
	var res Result
	r.Decide(&res, tat, now, cost)
	return res.TAT, res.Allowed
}

// Spend returns the TAT of a key whose TAT is tat after an admission of
// cost at now that was not decided by this rate (another replica's,
// counted as it is learned): max(tat, now) + cost x Interval, unchecked.
func (r Rate) Spend(tat, now int64, cost uint64) int64 {
	return satAddInt(max(tat, now), r.Cost(cost))
}

func mulSat(a uint64, b int64) int64 {
	if b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(a, uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// satSub returns a-b for a >= b, saturating at MaxInt64.
func satSub(a, b int64) int64 {
	d := a - b
	if d < 0 && a >= b {
		return math.MaxInt64
	}
	return d
}

func satAddInt(a, b int64) int64 {
	s := a + b
	if b > 0 && s < a {
		return math.MaxInt64
	}
	return s
}
