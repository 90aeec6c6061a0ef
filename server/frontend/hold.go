package frontend

import (
	"github.com/geolimit/geolimit/pop"
)

// Held is the concurrency leases a request holds while it is in flight
// (Env.DecideOrigin). The zero value holds none. Not safe for concurrent use.
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
		n.Release(now, h.a[i].ID())
	}
	for _, l := range h.more {
		n.Release(now, l.ID())
	}
	*h = Held{}
}
