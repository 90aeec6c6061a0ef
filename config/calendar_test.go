package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/window"
)

func TestParseCalendar(t *testing.T) {
	c, err := Parse([]byte("rules: [{name: daily, calendar: {period: day}, limit: 3}]"))
	require.NoError(t, err)
	rs, err := c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, window.Day, rs[0].Calendar.Period)
	assert.Equal(t, time.UTC, rs[0].Calendar.Location, "time_zone defaults to UTC")
	assert.Equal(t, 24*time.Hour, rs[0].Window, "the window is the period's nominal width")

	c, err = Parse([]byte(`rules:
  - name: plans
    key: header:X-Api-Key
    calendar: {period: month, time_zone: America/New_York}
    limit: 1000
    tier: header:X-Plan
    tiers: {pro: {limit: 100000}}
    overrides: [{key: big-customer, limit: 5000000}]
    on_partition: share
  - name: weekly
    calendar: {period: week, week_start: sunday, time_zone: Asia/Kathmandu}
    limit: 10
`))
	require.NoError(t, err)
	rs, err = c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, window.Month, rs[0].Calendar.Period)
	assert.Equal(t, "America/New_York", rs[0].Calendar.Location.String())
	assert.Equal(t, uint64(100000), rs[0].LimitsFor("k", "pro")[0].Limit, "tiers apply as usual")
	assert.Equal(t, uint64(5000000), rs[0].LimitsFor("big-customer", "")[0].Limit, "overrides apply as usual")
	assert.Equal(t, time.Sunday, rs[1].Calendar.WeekStart)
	assert.Equal(t, 7*24*time.Hour, rs[1].Window)

	c, err = Parse([]byte("rules: [{name: weekly, calendar: {period: week}, limit: 3}]"))
	require.NoError(t, err)
	rs, err = c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, time.Monday, rs[0].Calendar.WeekStart, "week_start defaults to monday")
}

func TestParseCalendarErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"bad time zone", "{name: r, limit: 5, calendar: {period: day, time_zone: Mars/Olympus}}",
			`rules[0].calendar.time_zone: unknown time zone "Mars/Olympus"`},
		{"machine's time zone", "{name: r, limit: 5, calendar: {period: day, time_zone: Local}}", `rules[0].calendar.time_zone: "Local" depends on the machine`},
		{"no period", "{name: r, limit: 5, calendar: {time_zone: UTC}}", "rules[0].calendar.period: required"},
		{"bad period", "{name: r, limit: 5, calendar: {period: year}}", `rules[0].calendar.period: unknown period "year"`},
		{"bad week start", "{name: r, limit: 5, calendar: {period: week, week_start: someday}}", `rules[0].calendar.week_start: unknown day "someday"`},
		{"week start of a month", "{name: r, limit: 5, calendar: {period: month, week_start: sunday}}", "rules[0].calendar.week_start: applies to period: week only"},
		{"unknown field", "{name: r, limit: 5, calendar: {period: day, zone: UTC}}", "zone"},
		{"with window", "{name: r, limit: 5, window: 1m, calendar: {period: day}}", "rules[0].window: set together with calendar"},
		{"with limits", "{name: r, limits: [{limit: 5, window: 1s}], calendar: {period: day}}", "rules[0].limits: set together with calendar"},
		{"with gcra", "{name: r, limit: 5, algorithm: gcra, calendar: {period: day}}", "rules[0].algorithm: gcra paces requests and has no calendar period"},
		{"with concurrency", "{name: r, limit: 5, kind: concurrency, calendar: {period: day}}", "rules[0].kind: concurrency limits requests in flight"},
		{"no limit", "{name: r, calendar: {period: day}}", "rules[0].limit: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte("rules: [" + tc.in + "]"))
			if err == nil {
				_, err = c.PopRules()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
