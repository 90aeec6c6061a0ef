// Calendar quotas: a rule whose Limit holds per calendar period (a day, a
// week or a month in a time zone) and is whole again at the period's end.
//
// A calendar period is a fixed window whose index is the period's
// (window.Calendar): the store, replication, share and keep, the state file
// and startup sync carry it as one more window index. The window maths is
// the sliding one with the previous window weighing nothing (Calendar.Split
// reports an elapsed time of at least the width), so a calendar decision
// runs the very path of a sliding one; only its waits differ: Retry-After
// and the reset count to the period's end in its time zone. The rule's
// current period, [start, end), is cached with its index (ruleState.split),
// so the date maths runs once per period, not per decision.
//
// Counts of a period that has ended weigh nothing but are kept for
// CalendarGrace (peers whose clocks lag still decide in it, late deltas
// still land), then swept by Tick.
//
// Spent quota is not forgotten before its period ends, whatever the memory
// budget: a key the store evicts leaves its counts in its rule's sketch and
// comes back with at least them (crdt's sketch.go), and a key that finds no
// room is decided by the rule's shared counter; both err towards denying.
// So a flood of new keys past the budget never hands a key a fresh quota;
// it may instead deny keys new to the store early, for the rest of the
// period (the sketch's cells do not decay within a period as they do
// across a sliding window's), and, until the grace has passed and the last
// period's keys are swept, keys of a store full of them are decided by the
// shared counter. Across a restart, the state file holds every tracked
// key's counts of the period and a node with peers syncs them on joining;
// the sketch is not in the state file, so a key evicted from a lone node's
// store before a restart starts from what the state file's keys leave.

package pop

import (
	"errors"
	"fmt"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// CalendarGrace is how long a calendar period's counts are kept once the
// period has ended, before a Tick sweeps them.
const CalendarGrace = 10 * time.Minute

// validateCalendar checks the calendar of r, if any, and the fields a
// calendar rule cannot have, naming the field.
func (r Rule) validateCalendar() error {
	c := r.Calendar
	switch {
	case c.IsZero():
		return nil
	case c.Period > window.Month:
		return fmt.Errorf("calendar.period: unknown period %d", c.Period)
	case c.WeekStart < time.Sunday || c.WeekStart > time.Saturday:
		return fmt.Errorf("calendar.week_start: unknown day %d", c.WeekStart)
	case r.Kind == Concurrency:
		return errors.New("kind: concurrency limits requests in flight, which have no calendar period; drop calendar or kind")
	case r.Algorithm == GCRA:
		return errors.New("algorithm: gcra paces requests and has no calendar period; drop calendar or algorithm")
	case len(r.More) > 0:
		return errors.New("limits: a calendar rule has one limit per period; give limit (tiers and overrides give other limits)")
	case r.Window != time.Duration(c.Width()):
		return fmt.Errorf("window: a calendar rule's window is its period's nominal width %s, got %s", time.Duration(c.Width()), r.Window)
	}
	return nil
}

// calendarOf returns a copy of r's calendar, nil for a sliding rule.
func calendarOf(r Rule) *window.Calendar {
	if r.Calendar.IsZero() {
		return nil
	}
	c := r.Calendar
	return &c
}

// splitCalendar is split for a calendar rule past its cached period: it
// computes the period holding now and caches it. A period for which
// Calendar.Split's elapsed would not be now - index*width (instants before
// 1970) is not cached.
func (r *ruleState) splitCalendar(now int64) (index, elapsed int64) {
	idx, start, end := r.cal.PeriodOf(now)
	base := idx * r.width
	if start-base >= r.width {
		r.cur.Store(&winCache{index: idx, start: start, end: end, base: base})
	}
	return idx, max(now-base, r.width)
}

// index returns the index of r's window that holds now: window.Split's
// for a sliding window; for a calendar rule split's, through its cache, so
// that a node that flushes, merges or sweeps a rule it decides little does
// not work out a date per entry. An instant in another period (now plus a
// peer's skew, a sweep's grace) moves the cache there; near a boundary
// decisions then move it back, for that skew only.
func (r *ruleState) index(now int64) int64 {
	if r.cal == nil {
		idx, _ := window.Split(now, r.width)
		return idx
	}
	idx, _ := r.split(now)
	return idx
}

// start returns the instant (Unix nanoseconds) at which r's window idx
// begins.
func (r *ruleState) start(idx int64) int64 {
	if r.cal == nil {
		return window.Start(idx, r.width)
	}
	s, _ := r.cal.Bounds(idx)
	return s
}

// periodEnd returns the end of the calendar period that holds now.
func (r *ruleState) periodEnd(now int64) int64 {
	if c := r.cur.Load(); c != nil && now >= c.start && now < c.end {
		return c.end
	}
	_, _, end := r.cal.PeriodOf(now)
	return end
}

// calendarAnswer turns res, the sliding answer of calendar rule w's window
// for a request of cost against limit at now, into the calendar's: a
// request denied by the period's count may retry at the period's end, and
// the whole limit is back then. A denial of the headroom split near the
// limit (crdt.Allowance) keeps its own, shorter wait; a request that can
// never fit keeps window.Never.
func (w *ruleState) calendarAnswer(res *window.Result, now int64, limit, cost uint64) {
	left := w.periodEnd(now) - now
	if res.Allowed {
		res.Reset = left
		return
	}
	if res.RetryAfter != window.Never && res.Estimate+float64(cost) > float64(limit) {
		res.RetryAfter = left
	}
	res.Reset = 0
	if res.Estimate > 0 {
		res.Reset = left
	}
}

// sweepLive is the window index function Tick sweeps the live rules with:
// indexFunc's, but for a calendar rule the index after the period that
// held now - CalendarGrace, so that a period's keys go once it has ended
// plus the grace, while the current period's stay.
func (n *Node) sweepLive(rs *ruleSet, now int64) func(crdt.RuleID) int64 {
	live := n.indexFunc(rs, now)
	var cals map[crdt.RuleID]int64 // the calendar rules' sweep indexes
	for _, r := range rs.sorted {
		if r.cal != nil {
			if cals == nil {
				cals = map[crdt.RuleID]int64{}
			}
			idx, _, _ := r.cal.PeriodOf(now - int64(CalendarGrace))
			cals[r.id] = idx + 1
		}
	}
	if cals == nil {
		return live
	}
	return func(id crdt.RuleID) int64 {
		if idx, ok := cals[id]; ok {
			return idx
		}
		return live(id)
	}
}
