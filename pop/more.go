package pop

import (
	"time"

	"github.com/geolimit/geolimit/window"
)

// moreState is what a Decision keeps of its binding window for MoreAfter:
// the totals decided on (curr with the request's cost), the limit applied
// (after any share), and where in which window it was decided. The hot path
// only copies it; the maths runs when asked.
type moreState struct {
	prev, curr, lim uint64
	elapsed, width  int64
}

// MoreAfter is the time until more quota is available if no other request
// arrives (the RateLimit field's t in draft-ietf-httpapi-ratelimit-headers-11):
// for a denied request (shadow-denied too) RetryAfter; for an admitted one
// the time until Remaining grows by at least 1 as the sliding estimate of
// the binding window decays (0 when the whole limit is available). It is
// computed on demand, so decisions that never report it do not pay for it.
func (d Decision) MoreAfter() time.Duration {
	if !d.Allowed || d.ShadowDenied {
		return d.RetryAfter
	}
	m := d.more
	if m.width == 0 {
		return 0
	}
	after := window.MoreAfter(m.lim, d.Remaining, m.prev, m.curr, m.elapsed, m.width)
	if after == window.Never {
		return d.Reset
	}
	return time.Duration(after)
}
