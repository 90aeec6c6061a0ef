package rls

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"

	"github.com/geolimit/geolimit/pop"
)

// TestRLSCurrentLimit: the unit is the shortest one at least as long as the
// window, and requests_per_unit the rule's rate over it, rounded down.
func TestRLSCurrentLimit(t *testing.T) {
	const (
		sec   = rlsv3.RateLimitResponse_RateLimit_SECOND
		min   = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour  = rlsv3.RateLimitResponse_RateLimit_HOUR
		day   = rlsv3.RateLimitResponse_RateLimit_DAY
		week  = rlsv3.RateLimitResponse_RateLimit_WEEK
		month = rlsv3.RateLimitResponse_RateLimit_MONTH
	)
	tests := []struct {
		limit  uint64
		window time.Duration
		per    uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{3, time.Second, 3, sec},
		{10, 500 * time.Millisecond, 20, sec},
		{10, 1500 * time.Millisecond, 400, min},
		{100, 10 * time.Second, 600, min},
		{100, time.Minute, 100, min},
		{5, 90 * time.Second, 200, hour},
		{5, 7 * time.Second, 42, min},
		{100, 2 * time.Hour, 1200, day},
		{7, 7 * 24 * time.Hour, 7, week},
		{1, 720 * time.Hour, 1, month},
		{1 << 40, time.Second, math.MaxUint32, sec},
		{math.MaxUint64, time.Millisecond, math.MaxUint32, sec},
	}
	for _, tt := range tests {
		l := rlsCurrentLimit(pop.Rule{Name: "r", Limit: tt.limit, Window: tt.window})
		assert.Equal(t, tt.per, l.GetRequestsPerUnit(), "%d per %s", tt.limit, tt.window)
		assert.Equal(t, tt.unit, l.GetUnit(), "%d per %s", tt.limit, tt.window)
		assert.Equal(t, "r", l.GetName())
		assert.Nil(t, l.GetUnitMultiplier())
	}
}
