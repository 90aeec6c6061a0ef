package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	// The zone database is built in: a static binary runs on hosts and
	// images (scratch, distroless, Windows) without /usr/share/zoneinfo,
	// where time.LoadLocation would refuse every name but UTC, and a
	// config valid on one machine would be refused on the next. With the
	// database embedded (about 450 kB), a time zone is valid or not
	// everywhere alike; a host's own database, when present, still wins.
	_ "time/tzdata"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/window"
)

// Calendar makes a rule a calendar quota: limit per day, week or month,
// whole again at the period's end in its time zone, instead of per sliding
// window (pop/calendar.go).
type Calendar struct {
	// Period is day, week or month.
	Period string `yaml:"period"`
	// TimeZone is an IANA time zone name (Europe/Paris, America/New_York)
	// in which periods start at midnight. Default UTC.
	TimeZone string `yaml:"time_zone"`
	// WeekStart is the first day of a week, for period: week only:
	// monday ... sunday. Default monday.
	WeekStart string `yaml:"week_start"`
}

var weekdays = map[string]time.Weekday{
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday,
	"thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday,
}

// popCalendar returns r's calendar (the zero Calendar when r has none),
// refusing the fields a calendar rule cannot have. Errors name the field
// below the rule.
func (r *Rule) popCalendar() (window.Calendar, error) {
	if r.Calendar == nil {
		return window.Calendar{}, nil
	}
	switch {
	case r.Window != 0:
		return window.Calendar{}, errors.New("window: set together with calendar: a calendar rule counts per period, not per sliding window; give one")
	case len(r.Limits) > 0:
		return window.Calendar{}, errors.New("limits: set together with calendar: a calendar rule has one limit per period (tiers and overrides give keys others)")
	case r.Algorithm == pop.GCRA.String():
		return window.Calendar{}, errors.New("algorithm: gcra paces requests and has no calendar period; drop calendar or algorithm")
	case r.Kind == pop.Concurrency.String():
		return window.Calendar{}, errors.New("kind: concurrency limits requests in flight, which have no calendar period; drop calendar or kind")
	}
	c, err := r.Calendar.parse()
	if err != nil {
		return window.Calendar{}, fmt.Errorf("calendar.%w", err)
	}
	return c, nil
}

func (c *Calendar) parse() (window.Calendar, error) {
	if c.Period == "" {
		return window.Calendar{}, errors.New("period: required (day, week or month)")
	}
	per, err := window.ParsePeriod(c.Period)
	if err != nil {
		return window.Calendar{}, fmt.Errorf("period: %w", err)
	}
	loc := time.UTC
	if c.TimeZone != "" {
		if c.TimeZone == "Local" {
			return window.Calendar{}, errors.New(`time_zone: "Local" depends on the machine; give an IANA name such as Europe/Paris, or UTC`)
		}
		if loc, err = time.LoadLocation(c.TimeZone); err != nil {
			return window.Calendar{}, fmt.Errorf("time_zone: unknown time zone %q (want an IANA name such as Europe/Paris, or UTC)", c.TimeZone)
		}
	}
	ws := time.Monday
	if c.WeekStart != "" {
		if per != window.Week {
			return window.Calendar{}, fmt.Errorf("week_start: applies to period: week only, not %s", per)
		}
		d, ok := weekdays[strings.ToLower(c.WeekStart)]
		if !ok {
			return window.Calendar{}, fmt.Errorf("week_start: unknown day %q (want monday ... sunday)", c.WeekStart)
		}
		ws = d
	}
	return window.Calendar{Period: per, Location: loc, WeekStart: ws}, nil
}
