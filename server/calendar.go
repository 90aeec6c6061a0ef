package server

import (
	"strings"

	"github.com/geolimit/geolimit/window"
)

// calendarOut is a calendar rule's calendar in GET /v1/status, as the
// config gives it.
type calendarOut struct {
	Period    string `json:"period"`
	TimeZone  string `json:"time_zone"`
	WeekStart string `json:"week_start,omitempty"`
}

// calendarStatus returns c as GET /v1/status shows it; nil for no calendar.
func calendarStatus(c window.Calendar) *calendarOut {
	if c.IsZero() {
		return nil
	}
	out := &calendarOut{Period: c.Period.String(), TimeZone: "UTC"}
	if c.Location != nil {
		out.TimeZone = c.Location.String()
	}
	if c.Period == window.Week {
		out.WeekStart = strings.ToLower(c.WeekStart.String())
	}
	return out
}
