package window_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/window"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestCalendarBoundsAgainstTime checks period bounds against Go's time
// package: across the November daylight-saving change in New York, at the
// end of February in a leap year and not, and for days and weeks.
func TestCalendarBoundsAgainstTime(t *testing.T) {
	nyc := mustLoad(t, "America/New_York")
	month := window.Calendar{Period: window.Month, Location: nyc}
	day := window.Calendar{Period: window.Day, Location: nyc}
	week := window.Calendar{Period: window.Week, Location: nyc, WeekStart: time.Monday}
	at := func(y int, m time.Month, d, h, min int) int64 {
		return time.Date(y, m, d, h, min, 0, 0, nyc).UnixNano()
	}
	cases := []struct {
		name       string
		cal        window.Calendar
		t          int64
		start, end time.Time
	}{
		{"november with the DST change", month, at(2026, time.November, 1, 1, 30),
			time.Date(2026, time.November, 1, 0, 0, 0, 0, nyc), time.Date(2026, time.December, 1, 0, 0, 0, 0, nyc)},
		{"last minute of october, before the change", month, at(2026, time.October, 31, 23, 59),
			time.Date(2026, time.October, 1, 0, 0, 0, 0, nyc), time.Date(2026, time.November, 1, 0, 0, 0, 0, nyc)},
		{"march with the DST change", month, at(2026, time.March, 8, 3, 30),
			time.Date(2026, time.March, 1, 0, 0, 0, 0, nyc), time.Date(2026, time.April, 1, 0, 0, 0, 0, nyc)},
		{"end of february", month, at(2026, time.February, 28, 23, 59),
			time.Date(2026, time.February, 1, 0, 0, 0, 0, nyc), time.Date(2026, time.March, 1, 0, 0, 0, 0, nyc)},
		{"end of february, leap year", month, at(2028, time.February, 29, 23, 59),
			time.Date(2028, time.February, 1, 0, 0, 0, 0, nyc), time.Date(2028, time.March, 1, 0, 0, 0, 0, nyc)},
		{"the 25-hour day", day, at(2026, time.November, 1, 12, 0),
			time.Date(2026, time.November, 1, 0, 0, 0, 0, nyc), time.Date(2026, time.November, 2, 0, 0, 0, 0, nyc)},
		{"the 23-hour day", day, at(2026, time.March, 8, 23, 59),
			time.Date(2026, time.March, 8, 0, 0, 0, 0, nyc), time.Date(2026, time.March, 9, 0, 0, 0, 0, nyc)},
		{"a monday week", week, at(2026, time.November, 1, 12, 0), // a Sunday
			time.Date(2026, time.October, 26, 0, 0, 0, 0, nyc), time.Date(2026, time.November, 2, 0, 0, 0, 0, nyc)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx, start, end := tc.cal.PeriodOf(tc.t)
			assert.Equal(t, tc.start.UnixNano(), start)
			assert.Equal(t, tc.end.UnixNano(), end)
			s, e := tc.cal.Bounds(idx)
			assert.Equal(t, start, s)
			assert.Equal(t, end, e)
			assert.Equal(t, end-tc.t, tc.end.Sub(time.Unix(0, tc.t)).Nanoseconds(), "time to the boundary")
		})
	}
	// The November month is 30 days and an hour; February 2026 is 28 days.
	_, s, e := month.PeriodOf(at(2026, time.November, 15, 0, 0))
	assert.Equal(t, 30*24*time.Hour+time.Hour, time.Duration(e-s))
	_, s, e = month.PeriodOf(at(2026, time.February, 15, 0, 0))
	assert.Equal(t, 28*24*time.Hour, time.Duration(e-s))
}

// TestCalendarSplit checks, over many instants from 1970 to 2250 in
// several zones, that consecutive periods have consecutive indexes, that
// the period holds the instant, and that Split's elapsed is exactly
// t - idx*Width and at least Width (the previous period weighs nothing).
func TestCalendarSplit(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia", "America/Sao_Paulo"}
	for _, z := range zones {
		loc := mustLoad(t, z)
		for _, p := range []window.Period{window.Day, window.Week, window.Month} {
			starts := []time.Weekday{time.Monday}
			if p == window.Week {
				starts = []time.Weekday{time.Monday, time.Sunday, time.Saturday}
			}
			for _, ws := range starts {
				c := window.Calendar{Period: p, Location: loc, WeekStart: ws}
				w := c.Width()
				// A prime step visits every hour of the day and day of the week.
				step := int64(7*24*time.Hour+13*time.Hour+17*time.Minute) * 19
				prevIdx, prevEnd := int64(0), int64(0)
				for tt := int64(0); tt < time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(); tt += step {
					idx, start, end := c.PeriodOf(tt)
					require.True(t, start <= tt && tt < end, "%s %s: %d not in [%d, %d)", z, p, tt, start, end)
					if prevEnd != 0 && start == prevEnd {
						require.Equal(t, prevIdx+1, idx, "%s %s: consecutive periods", z, p)
					}
					before, _, bend := c.PeriodOf(start - 1)
					require.Equal(t, idx-1, before, "%s %s: the period before", z, p)
					require.Equal(t, start, bend)
					si, el := c.Split(tt)
					require.Equal(t, idx, si)
					require.Equal(t, tt-idx*w, el, "%s %s at %s", z, p, time.Unix(0, tt))
					require.GreaterOrEqual(t, el, w)
					assert.Zero(t, window.Estimate(1000, 7, el, w)-7, "the previous period weighs nothing")
					prevIdx, prevEnd = idx, end
				}
			}
		}
	}
}

func TestParsePeriod(t *testing.T) {
	for _, p := range []window.Period{window.Day, window.Week, window.Month} {
		got, err := window.ParsePeriod(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	_, err := window.ParsePeriod("year")
	assert.ErrorContains(t, err, `unknown period "year"`)
}
