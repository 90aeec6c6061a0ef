// The clock a node decides on stepping forward: StepForward.

package pop

import (
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// StepForward tells the node that the clock it is given stepped forward
// from before to after (Unix nanoseconds; a fleet clock's correction grew):
// the keys counted in the window the clock left move forward with their
// own counts (crdt.Store.StepForward), for every rule window the step
// crosses into a later one by three eighths of a window or more, or landing at least
// half of what had passed of the window the clock left in a later one
// (taking the counts as spread evenly over that part): a clock behind the
// fleet's, not one that swings by a fraction of a window as the PoPs'
// offsets move (a window of 1 s: 150 ms both ways
// twice a second, where carrying the counts of every swing across a window
// boundary counted them twice and held the fleet to 0.62 of the central
// limiter's admits). A clock that steps back needs no call: the store
// moves a key back at its first decision after the step (crdt's rebase).
// Safe for concurrent use.
func (l Link) StepForward(before, after int64) {
	n := l.n
	if after <= before {
		return
	}
	type step struct{ from, to int64 }
	steps := map[crdt.RuleID]step{}
	for id, r := range n.rules.Load().byID {
		if r.gcra || r.pacer != nil || r.cal != nil {
			continue
		}
		from, el := window.Split(before, r.width)
		if to := r.index(after); to > from && (8*(after-before) >= 3*r.width || el/2+(after-before) >= r.width) {
			steps[id] = step{from, to}
		}
	}
	if len(steps) == 0 {
		return
	}
	n.store.StepForward(func(id crdt.RuleID) (int64, int64, bool) {
		s, ok := steps[id]
		return s.from, s.to, ok
	})
}

// ClockStepped tells the node that the clock it is given stepped from
// before to after: a step forward carries keys (StepForward); a step back
// needs nothing here.
func (l Link) ClockStepped(before, after int64) {
	if after > before {
		l.StepForward(before, after)
	}
}
