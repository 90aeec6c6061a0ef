package frontend

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/pop"
)

// Held is the concurrency leases a request holds while it is in flight
// (HoldOrigin). The zero value holds none. Not safe for concurrent use.
type Held struct {
	n    int
	a    [4]pop.Lease
	more []pop.Lease
}

// take keeps the leases c's checks acquired (a denied request holds
// none: the pipeline gave them back).
func (h *Held) take(c *Checks) {
	for i := range c.Res {
		if l := c.Res[i].Lease; l.Held() {
			if h.n < len(h.a) {
				h.a[h.n] = l
				h.n++
			} else {
				h.more = append(h.more, l)
			}
		}
	}
}

// Empty reports whether no lease is held.
func (h *Held) Empty() bool { return h.n == 0 }

// Release gives back every lease held.
func (h *Held) Release(n *pop.Node, now int64) {
	for i := range h.n {
		n.Release(now, h.a[i])
	}
	for _, l := range h.more {
		n.Release(now, l)
	}
	*h = Held{}
}

// HoldOrigin is AnswerOrigin for a front end that holds the request while
// it is in flight (proxy mode, the middleware): the concurrency rules that
// apply are checked too, and an allowed request's slots go to held, to be
// given back (Held.Release) when the request ends, however it ends.
func (e *Env) HoldOrigin(w http.ResponseWriter, rs *Rules, o *Origin, status int, start time.Time, lat prometheus.Observer, held *Held) bool {
	return e.answerOrigin(w, rs, o, status, start, lat, held)
}
