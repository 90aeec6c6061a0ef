package server

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCalendarAPI: {calendar: {period: day}, limit: 3} admits 3 and denies
// the 4th, whose Retry-After, RateLimit t and reset_ms count to the next
// midnight UTC; RateLimit-Policy's w is the day's length.
func TestCalendarAPI(t *testing.T) {
	ta := startApp(t, "rules:\n  - {name: daily, calendar: {period: day}, limit: 3}\n")
	now := time.Unix(0, ta.Clk.Now()).UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	toMidnight := midnight.Sub(now)
	for i := range 3 {
		r := ta.Post("/v1/check", `{"rule":"daily","key":"k"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		m := r.JSON(t)
		assert.Equal(t, true, m["allowed"])
		assert.EqualValues(t, 2-i, m["remaining"])
		assert.EqualValues(t, toMidnight.Milliseconds(), m["reset_ms"])
		assert.Equal(t, `"daily";q=3;w=86400`, r.Header.Get("RateLimit-Policy"))
	}
	r := ta.Post("/v1/check", `{"rule":"daily","key":"k"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	m := r.JSON(t)
	assert.EqualValues(t, toMidnight.Milliseconds(), m["retry_after_ms"])
	assert.EqualValues(t, toMidnight.Milliseconds(), m["reset_ms"])
	secs := int64((toMidnight + time.Second - 1) / time.Second)
	assert.Equal(t, secs, servertest.HeaderInt(t, r.Header, "Retry-After"), "seconds to the next midnight UTC")
	_, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, map[string]int64{"r": 0, "t": secs}, p)

	ta.Clk.Advance(toMidnight - time.Millisecond)
	r = ta.Post("/v1/check", `{"rule":"daily","key":"k"}`)
	assert.Equal(t, http.StatusTooManyRequests, r.Status, "a millisecond before midnight")
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	ta.Clk.Advance(time.Millisecond)
	for range 3 {
		r = ta.Post("/v1/check", `{"rule":"daily","key":"k"}`)
		require.Equal(t, http.StatusOK, r.Status, "the whole limit at midnight: %s", r.Body)
	}

	r = ta.Get("/v1/status")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	rule := r.JSON(t)["rules"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"period": "day", "time_zone": "UTC"}, rule["calendar"])
}

// TestCalendarProxyPolicy: a monthly quota in New York, through the proxy:
// RateLimit-Policy's w is the length of the month the request falls in (an
// hour more in November, when the clocks go back), and the 429's
// Retry-After counts to the first of the next month, local midnight.
func TestCalendarProxyPolicy(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", `
  - {name: monthly, limit: 1, calendar: {period: month, time_zone: America/New_York}, match: {path_prefix: /api}}
`))
	nyc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	at := time.Date(2026, time.November, 30, 12, 0, 0, 0, nyc)
	ta.Clk.Set(at.UnixNano())
	r := ta.Proxy("GET", "/api/x")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	november := time.Date(2026, time.December, 1, 0, 0, 0, 0, nyc).Sub(time.Date(2026, time.November, 1, 0, 0, 0, 0, nyc))
	assert.Equal(t, `"monthly";q=1;w=`+strconv.Itoa(int(november/time.Second)), r.Header.Get("RateLimit-Policy"))
	assert.Equal(t, 30*24*3600+3600, int(november/time.Second))
	r = ta.Proxy("GET", "/api/x")
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, int64(12*3600), servertest.HeaderInt(t, r.Header, "Retry-After"), "to midnight, December 1st, in New York")
	assert.Equal(t, 1, up.Count())

	ta.Clk.Set(time.Date(2026, time.December, 1, 0, 0, 0, 0, nyc).UnixNano())
	r = ta.Proxy("GET", "/api/x")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, `"monthly";q=1;w=`+strconv.Itoa(31*24*3600), r.Header.Get("RateLimit-Policy"))
}
