package window

import (
	"fmt"
	"time"
)

// Calendar periods: a fixed window that starts and ends at the calendar's
// boundaries (midnight, the first day of a week, the first of a month) in a
// time zone, instead of a sliding window of a fixed width.
//
// A period is one more window index to everything that stores or replicates
// counts: index P counts periods since 2000-01-01 (the first week start on
// or before it for weeks) in the calendar's time zone, so consecutive
// periods have consecutive indexes. Counts of period P-1 weigh nothing in
// period P: the whole limit is available again at the boundary. To keep the
// sliding maths of every caller, Split reports the elapsed time from the
// instant P*Width, which lies years before the period for every period
// since 1970 (Width is at most the average length of a period), so that
// Estimate and Decide see a previous window that has fully passed (f = 1)
// and Index*Width + Elapsed is the instant itself:
//
//	cal := window.Calendar{Period: window.Month, Location: nyc}
//	idx, elapsed := cal.Split(now)   // for window.Decide(limit, cost, prev, curr, elapsed, cal.Width())
//	start, end := cal.Bounds(idx)    // the period's [start, end) in Unix nanoseconds

// Period is the length of a calendar period: Day, Week or Month. The zero
// value is NoPeriod: no calendar.
type Period uint8

// Periods.
const (
	NoPeriod Period = iota
	Day
	Week
	Month
)

var periodNames = [...]string{"", "day", "week", "month"}

func (p Period) String() string {
	if int(p) < len(periodNames) {
		return periodNames[p]
	}
	return fmt.Sprintf("Period(%d)", p)
}

// ParsePeriod parses "day", "week" or "month".
func ParsePeriod(s string) (Period, error) {
	for i, n := range periodNames[1:] {
		if s == n {
			return Period(i + 1), nil
		}
	}
	return NoPeriod, fmt.Errorf("unknown period %q (want day, week or month)", s)
}

// Calendar is a period in a time zone. The zero value is no calendar.
// A Calendar is a value: safe for concurrent use.
type Calendar struct {
	// Period is Day, Week or Month.
	Period Period
	// Location is the time zone the boundaries fall in; nil means UTC.
	Location *time.Location
	// WeekStart is the first day of a week (Week only).
	WeekStart time.Weekday
}

// IsZero reports whether c is no calendar.
func (c Calendar) IsZero() bool { return c.Period == NoPeriod }

// Equal reports whether c and o have the same boundaries: same period,
// same time zone (by name) and, for weeks, same first day.
func (c Calendar) Equal(o Calendar) bool {
	return c.Period == o.Period && c.loc().String() == o.loc().String() &&
		(c.Period != Week || c.WeekStart == o.WeekStart)
}

func (c Calendar) loc() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// Width is the period's nominal length in nanoseconds: 24h, 168h or 720h
// (30 days, below the average month). Periods may be longer or shorter
// (daylight saving, month lengths); Bounds gives the true ones.
func (c Calendar) Width() int64 {
	switch c.Period {
	case Day:
		return int64(24 * time.Hour)
	case Week:
		return int64(7 * 24 * time.Hour)
	}
	return int64(30 * 24 * time.Hour)
}

// originDay is 2000-01-01 in days since 1970-01-01; it was a Saturday.
const (
	originDay     = 10957
	originWeekday = time.Saturday
)

// weekShift is the day, relative to 2000-01-01, on which week 0 starts:
// the week start on or before it.
func (c Calendar) weekShift() int64 {
	return -int64((originWeekday - c.WeekStart + 7) % 7)
}

// Bounds returns the period of index idx as [start, end) in Unix
// nanoseconds: from its first local midnight to the next period's.
func (c Calendar) Bounds(idx int64) (start, end int64) {
	return c.startOf(idx), c.startOf(idx + 1)
}

// startOf is the first instant of period idx. Where a zone skips local
// midnight, Go's time.Date places it (at the instant of the change).
func (c Calendar) startOf(idx int64) int64 {
	loc := c.loc()
	switch c.Period {
	case Day:
		return time.Date(2000, time.January, 1+int(idx), 0, 0, 0, 0, loc).UnixNano()
	case Week:
		return time.Date(2000, time.January, 1+int(c.weekShift()+7*idx), 0, 0, 0, 0, loc).UnixNano()
	}
	return time.Date(2000, time.January+time.Month(idx), 1, 0, 0, 0, 0, loc).UnixNano()
}

// PeriodOf returns the index and bounds [start, end) of the period that holds
// the instant t (Unix nanoseconds).
func (c Calendar) PeriodOf(t int64) (idx, start, end int64) {
	lt := time.Unix(0, t).In(c.loc())
	y, m, d := lt.Date()
	switch c.Period {
	case Day:
		idx = civilDay(y, m, d) - originDay
	case Week:
		idx = floorDiv(civilDay(y, m, d)-originDay-c.weekShift(), 7)
	default:
		idx = int64(y-2000)*12 + int64(m-1)
	}
	start, end = c.Bounds(idx)
	// A zone whose local midnight moves (a skipped day, a change at
	// midnight) may put t just outside; one step fixes it.
	for range 2 {
		switch {
		case t < start:
			idx--
		case t >= end:
			idx++
		default:
			return idx, start, end
		}
		start, end = c.Bounds(idx)
	}
	return idx, start, end
}

// Split returns the index of the period that holds t and the nanoseconds
// since the instant idx*Width: at least Width, so that the sliding maths
// (Estimate, Decide) gives the previous period no weight. For every
// instant since 1970 it is exactly t - idx*Width.
func (c Calendar) Split(t int64) (idx, elapsed int64) {
	idx, _, _ = c.PeriodOf(t)
	w := c.Width()
	return idx, max(t-idx*w, w)
}

func civilDay(y int, m time.Month, d int) int64 {
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86400)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
