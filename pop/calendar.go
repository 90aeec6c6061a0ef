// Calendar quotas: a rule whose Limit holds per calendar period (a day, a
// week or a month in a time zone) and is whole again at the period's end.

package pop

import (
	"errors"
	"fmt"
	"time"

	"github.com/geolimit/geolimit/window"
)

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
