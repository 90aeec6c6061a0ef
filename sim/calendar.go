package sim

import (
	"github.com/geolimit/geolimit/window"
)

// calPeriods is the oracle's view of a calendar rule (pop/calendar.go): an
// admit counts in the period of the rule's calendar that holds it, so the
// exact count at t is the cost admitted since that period's start, and the
// whole limit is back at its end. It caches the current period, in run
// time (nanoseconds since the run's start), as the daemon does; the engine
// is single-threaded.
type calPeriods struct {
	cal        window.Calendar
	epoch      int64 // the Unix time of run time 0
	start, end int64 // the cached period [start, end), run time
}

// calendarOf returns the calendar periods of rule ri, nil for a rule
// without a calendar. The rule's keys share it.
func (e *engine) calendarOf(ri int) *calPeriods {
	r := e.rules[ri]
	if r.Calendar.IsZero() {
		return nil
	}
	if e.cals == nil {
		e.cals = map[int]*calPeriods{}
	}
	c := e.cals[ri]
	if c == nil {
		c = &calPeriods{cal: r.Calendar, epoch: e.epoch, start: 1, end: 0}
		e.cals[ri] = c
	}
	return c
}

// startOf returns the start, in run time, of the period that holds t.
func (c *calPeriods) startOf(t int64) int64 {
	if t < c.start || t >= c.end {
		_, s, e := c.cal.PeriodOf(c.epoch + t)
		c.start, c.end = s-c.epoch, e-c.epoch
	}
	return c.start
}

// cutoff returns the run time at or before which k's admits no longer
// count at t: t - width for a sliding window, the last instant before the
// period that holds t for a calendar rule.
func (k *keyInfo) cutoff(t int64) int64 {
	if k.cal == nil {
		return t - k.width
	}
	return k.cal.startOf(t) - 1
}

// windowIndex returns the index of k's rule's window that holds the Unix
// time at, as the nodes number it: a sliding window's, or the period's.
func (k *keyInfo) windowIndex(at int64) int64 {
	if k.cal == nil {
		return at / k.width
	}
	idx, _, _ := k.cal.cal.PeriodOf(at)
	return idx
}
