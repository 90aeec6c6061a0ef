package frontend

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/pop"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "<&>", "\x00\x1f\n\r\t", "é😀", "\xff\xfe", "\u2028\u2029"} {
		got := AppendString(nil, s)
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%q", s)
	}
}

// The RateLimit headers read the same whether their values fit the one
// allocation (a short rule name, small numbers) or not (a long name, a
// limit of 13 digits), allowed or denied.
func TestRateLimitHeaders(t *testing.T) {
	long := strings.Repeat("n", 60)
	cfg, err := config.Parse([]byte("rules:\n" +
		"  - {name: api, limit: 100, window: 1m, scope: node}\n" +
		"  - {name: " + long + ", limit: 1000000000000, window: 1m, scope: node}\n"))
	require.NoError(t, err)
	rs, _, err := Compile(cfg, func(string) *RuleMetrics { return &RuleMetrics{} })
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		rule string
		d    pop.Decision
		more time.Duration
		want http.Header
	}{
		{"short allowed", "api", pop.Decision{Allowed: true, Limit: 100, Remaining: 7, Reset: 2500 * time.Millisecond}, 300 * time.Millisecond, http.Header{
			HPolicy: {`"api";q=100;w=60`}, HRateLimit: {`"api";r=7;t=1`}, HXLimit: {"100"}, HXRemaining: {"7"}, HXReset: {"3"}}},
		{"short denied", "api", pop.Decision{Limit: 100, Reset: 50 * time.Second, RetryAfter: 4100 * time.Millisecond}, 0, http.Header{
			HPolicy: {`"api";q=100;w=60`}, HRateLimit: {`"api";r=0;t=5`}, HXLimit: {"100"}, HXRemaining: {"0"}, HXReset: {"5"}, HRetryAfter: {"5"}}},
		{"long allowed", long, pop.Decision{Allowed: true, Limit: 1000000000000, Remaining: 999999999999, Reset: time.Second}, 0, http.Header{
			HPolicy: {`"` + long + `";q=1000000000000;w=60`}, HRateLimit: {`"` + long + `";r=999999999999;t=0`}, HXLimit: {"1000000000000"},
			HXRemaining: {"999999999999"}, HXReset: {"1"}}},
		{"long denied", long, pop.Decision{Limit: 1000000000000, Reset: time.Minute, RetryAfter: time.Millisecond}, 0, http.Header{
			HPolicy: {`"` + long + `";q=1000000000000;w=60`}, HRateLimit: {`"` + long + `";r=0;t=1`}, HXLimit: {"1000000000000"},
			HXRemaining: {"0"}, HXReset: {"1"}, HRetryAfter: {"1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			RateLimitHeaders(rs.ByName[tc.rule], tc.d, tc.more, 0).Set(h)
			assert.Equal(t, tc.want, h)
		})
	}
	// A short answer's values take one allocation (the map's slots are
	// there already).
	h := http.Header{}
	d := pop.Decision{Allowed: true, Limit: 100, Remaining: 7, Reset: time.Second}
	RateLimitHeaders(rs.ByName["api"], d, 0, 0).Set(h)
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { RateLimitHeaders(rs.ByName["api"], d, 0, 0).Set(h) }))
}

// BenchmarkRateLimitHeaders sets an allowed answer's headers into a new
// header map, as net/http hands one to each request.
func BenchmarkRateLimitHeaders(b *testing.B) {
	cfg, err := config.Parse([]byte("rules: [{name: bench, limit: 1000000000000, window: 1m, scope: node}]\n"))
	require.NoError(b, err)
	rs, _, err := Compile(cfg, func(string) *RuleMetrics { return &RuleMetrics{} })
	require.NoError(b, err)
	cr := rs.ByName["bench"]
	d := pop.Decision{Allowed: true, Limit: 1000000000000, Remaining: 999999999876, Reset: 42 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		RateLimitHeaders(cr, d, 700*time.Millisecond, 0).Set(http.Header{})
	}
}
