package pop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/geolimit/geolimit/window"
)

func TestCalendarRuleValidate(t *testing.T) {
	day := window.Calendar{Period: window.Day}
	ok := Rule{Name: "d", Limit: 3, Cost: 1, Window: 24 * time.Hour, Calendar: day}
	assert.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name string
		edit func(*Rule)
		want string
	}{
		{"window not the period's", func(r *Rule) { r.Window = time.Hour }, "window: a calendar rule's window is its period's nominal width 24h0m0s"},
		{"several windows", func(r *Rule) { r.More = []Limit{{Limit: 9, Window: time.Hour}} }, "limits: a calendar rule has one limit per period"},
		{"gcra", func(r *Rule) { r.Algorithm = GCRA }, "algorithm: gcra"},
		{"concurrency", func(r *Rule) { r.Kind = Concurrency }, "kind: concurrency"},
		{"unknown period", func(r *Rule) { r.Calendar.Period = 9 }, "calendar.period: unknown period 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			assert.ErrorContains(t, r.Validate(), tc.want)
		})
	}
}
