package pop

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/window"
)

func calendarRule(name string, c window.Calendar, limit uint64) Rule {
	return Rule{Name: name, Limit: limit, Cost: 1, Window: time.Duration(c.Width()), Calendar: c, Scope: ScopeGlobal}
}

func calendarNode(t *testing.T, self identity.Replica, rules ...Rule) *Node {
	t.Helper()
	n, err := New(Config{Self: self, Rules: rules})
	require.NoError(t, err)
	return n
}

// TestCalendarDayAdmitsLimitThenWaitsForMidnight: {calendar: {period: day},
// limit: 3} admits 3 and denies the 4th, which may retry at the next
// midnight UTC; the whole limit is back then, with no sliding blend.
func TestCalendarDayAdmitsLimitThenWaitsForMidnight(t *testing.T) {
	n := calendarNode(t, replica("a", 1), calendarRule("daily", window.Calendar{Period: window.Day}, 3))
	now := time.Date(2026, time.November, 28, 22, 0, 0, 0, time.UTC).UnixNano()
	midnight := time.Date(2026, time.November, 29, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 3 {
		d, err := n.Decide(now+int64(i)*int64(time.Minute), "daily", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i+1)
		assert.Equal(t, uint64(2-i), d.Remaining)
		assert.Equal(t, time.Duration(midnight-now-int64(i)*int64(time.Minute)), d.Reset, "the whole limit is back at midnight")
	}
	at := now + int64(time.Hour)
	d, err := n.Decide(at, "daily", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the 4th is denied")
	assert.Equal(t, time.Duration(midnight-at), d.RetryAfter, "Retry-After: to the next midnight UTC")
	assert.Equal(t, time.Duration(midnight-at), d.Reset)
	assert.Equal(t, time.Duration(midnight-at), n.MoreAfter(at, mustHandle(n, "daily"), "k", d, Options{}))

	d, err = n.Decide(midnight-1, "daily", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "denied to the last nanosecond of the day")
	assert.Equal(t, time.Duration(1), d.RetryAfter)
	for i := range 3 {
		d, err = n.Decide(midnight+int64(i), "daily", "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the whole limit at midnight: request %d", i+1)
	}
	d, err = n.Decide(midnight+int64(time.Hour), "daily", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	v, err := n.View(midnight+int64(time.Hour), "daily", "k")
	require.NoError(t, err)
	assert.Equal(t, 3.0, v.Estimate, "the previous day weighs nothing")
}

// TestCalendarMonthResetExact: a month in America/New_York resets at its
// local midnight, exactly as Go's time package counts, across the
// November daylight-saving change and at the end of February.
func TestCalendarMonthResetExact(t *testing.T) {
	nyc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	n := calendarNode(t, replica("a", 1), calendarRule("monthly", window.Calendar{Period: window.Month, Location: nyc}, 2))
	for _, tc := range []struct {
		name     string
		at, next time.Time
	}{
		{"before the November change", time.Date(2026, time.October, 31, 20, 0, 0, 0, nyc), time.Date(2026, time.November, 1, 0, 0, 0, 0, nyc)},
		{"during the repeated hour", time.Date(2026, time.November, 1, 1, 30, 0, 0, nyc), time.Date(2026, time.December, 1, 0, 0, 0, 0, nyc)},
		{"after the change", time.Date(2026, time.November, 30, 23, 59, 59, 0, nyc), time.Date(2026, time.December, 1, 0, 0, 0, 0, nyc)},
		{"end of February", time.Date(2027, time.February, 28, 23, 0, 0, 0, nyc), time.Date(2027, time.March, 1, 0, 0, 0, 0, nyc)},
		{"end of February, leap year", time.Date(2028, time.February, 28, 23, 0, 0, 0, nyc), time.Date(2028, time.March, 1, 0, 0, 0, 0, nyc)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.name
			now := tc.at.UnixNano()
			for range 2 {
				d, err := n.Decide(now, "monthly", key, 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				assert.Equal(t, tc.next.Sub(tc.at), d.Reset)
			}
			d, err := n.Decide(now, "monthly", key, 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			assert.Equal(t, tc.next.Sub(tc.at), d.RetryAfter)
			d, err = n.Decide(tc.next.UnixNano(), "monthly", key, 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the limit is back at the boundary")
		})
	}
}

// TestCalendarTiers: plans are tiers of a calendar rule.
func TestCalendarTiers(t *testing.T) {
	r := calendarRule("plans", window.Calendar{Period: window.Month}, 2)
	r.Tiers = map[string][]Limit{"pro": {{Limit: 5, Window: r.Window}}}
	n := calendarNode(t, replica("a", 1), r)
	now := time.Date(2026, time.November, 30, 12, 0, 0, 0, time.UTC).UnixNano()
	end := time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	admitted := func(key, tier string) int {
		k := 0
		for range 10 {
			d, err := n.DecideWith(now, "plans", key, 1, Options{Tier: tier})
			require.NoError(t, err)
			if d.Allowed {
				k++
			} else {
				assert.Equal(t, time.Duration(end-now), d.RetryAfter)
			}
		}
		return k
	}
	assert.Equal(t, 2, admitted("free-customer", ""))
	assert.Equal(t, 5, admitted("pro-customer", "pro"))
}

// TestCalendarReplicatesAndSweeps: a period's counts travel as one more
// window, stay through the next period's first CalendarGrace and are then
// swept.
func TestCalendarReplicatesAndSweeps(t *testing.T) {
	rule := calendarRule("daily", window.Calendar{Period: window.Day}, 3)
	a := calendarNode(t, replica("a", 1), rule)
	b := calendarNode(t, replica("b", 1), rule)
	now := time.Date(2026, time.November, 28, 22, 0, 0, 0, time.UTC).UnixNano()
	midnight := time.Date(2026, time.November, 29, 0, 0, 0, 0, time.UTC).UnixNano()
	for range 3 {
		d, err := a.Decide(now, "daily", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	st := exchange(t, now, a, b, ScopePoP)
	require.Equal(t, 1, st.Merged, "%+v", st)
	d, err := b.Decide(now, "daily", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "b knows a spent the day's quota")
	assert.Equal(t, time.Duration(midnight-now), d.RetryAfter)

	b.Tick(midnight + int64(CalendarGrace) - 1)
	assert.Equal(t, 1, b.Stats().Store.Keys, "kept through the grace")
	b.Tick(midnight + int64(CalendarGrace))
	assert.Zero(t, b.Stats().Store.Keys, "swept once the period has ended plus the grace")
}

// TestCalendarConcurrentDecideAcrossBoundary: goroutines deciding around
// midnight, while the cached period changes under them, admit at most the
// limit per period.
func TestCalendarConcurrentDecideAcrossBoundary(t *testing.T) {
	const limit = 50
	n := calendarNode(t, replica("a", 1), calendarRule("daily", window.Calendar{Period: window.Day}, limit))
	midnight := time.Date(2026, time.November, 29, 0, 0, 0, 0, time.UTC).UnixNano()
	var before, after atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				now := midnight - 100 + int64(i) // half before, half after
				d, err := n.Decide(now, "daily", "k"+strconv.Itoa(g%2), 1)
				if err != nil || !d.Allowed {
					continue
				}
				if now < midnight {
					before.Add(1)
				} else {
					after.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, before.Load(), int64(2*limit))
	assert.LessOrEqual(t, after.Load(), int64(2*limit))
	assert.Positive(t, after.Load(), "the new day opens")
}

// TestCalendarRuleChangeStartsAfresh: a sliding rule redefined as a
// calendar one of the same width, or a calendar moved to another zone,
// does not take over the former counts.
func TestCalendarRuleChangeStartsAfresh(t *testing.T) {
	sliding := Rule{Name: "r", Limit: 3, Cost: 1, Window: 24 * time.Hour, Scope: ScopeGlobal}
	n := calendarNode(t, replica("a", 1), sliding)
	now := time.Date(2026, time.November, 28, 22, 0, 0, 0, time.UTC).UnixNano()
	for range 3 {
		_, err := n.Decide(now, "r", "k", 1)
		require.NoError(t, err)
	}
	cal := calendarRule("r", window.Calendar{Period: window.Day}, 3)
	require.NoError(t, n.SetRules([]Rule{cal}))
	d, err := n.Decide(now, "r", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	cal.Calendar.Location = tokyo
	require.NoError(t, n.SetRules([]Rule{cal}))
	v, err := n.View(now, "r", "k")
	require.NoError(t, err)
	assert.Zero(t, v.Estimate)
}
