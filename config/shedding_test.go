package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseShedding(t *testing.T) {
	c, err := Parse([]byte(`
shedding:
  max_in_flight: 512
  retry_after: 2s
  target_latency: 250ms
  classes:
    - {name: critical, match: {path_prefix: /checkout}}
    - {name: writes, match: {methods: [POST, PUT, DELETE]}}
    - {name: reads, match: {methods: [GET]}}
    - {name: test, match: {host: canary.example.com}}
`))
	require.NoError(t, err)
	s := c.Shedding
	assert.True(t, s.Enabled())
	assert.Equal(t, 512, s.MaxInFlight)
	assert.Equal(t, 2*time.Second, s.RetryAfter.D())
	assert.Equal(t, 250*time.Millisecond, s.TargetLatency.D())
	require.Len(t, s.Classes, 4)
	assert.Equal(t, "writes", s.Classes[1].Name)
	assert.Equal(t, []string{"POST", "PUT", "DELETE"}, s.Classes[1].Match.Methods)

	d := DefaultConfig()
	assert.False(t, d.Shedding.Enabled(), "off by default")
	assert.Equal(t, DefaultShedRetryAfter, d.Shedding.RetryAfter.D())
}

func TestSheddingErrors(t *testing.T) {
	two := "  classes: [{name: a, match: {path_prefix: /a}}, {name: b}]\n"
	tests := []struct {
		name, in, want string
	}{
		{"negative max", "shedding:\n  max_in_flight: -1\n" + two, "shedding.max_in_flight: must be 0 (off) or 2 to 1073741824, got -1"},
		{"max of one", "shedding:\n  max_in_flight: 1\n" + two, "shedding.max_in_flight: must be 0 (off) or 2 to 1073741824, got 1"},
		{"max too large", "shedding:\n  max_in_flight: 2147483648\n" + two, "shedding.max_in_flight: must be 0 (off) or 2 to 1073741824, got 2147483648"},
		{"classes without max", "shedding:\n" + two, "shedding.max_in_flight: required (2 to 1073741824) when classes are set"},
		{"max without classes", "shedding: {max_in_flight: 10}", "shedding.classes: at least two classes are needed when max_in_flight is set (the first is never shed), got 0"},
		{"one class", "shedding: {max_in_flight: 10, classes: [{name: a}]}", "shedding.classes: at least two classes are needed"},
		{"zero retry after", "shedding:\n  max_in_flight: 10\n  retry_after: 0s\n" + two, "shedding.retry_after: must be positive and at most 1h0m0s, got 0s"},
		{"retry after too long", "shedding:\n  max_in_flight: 10\n  retry_after: 2h\n" + two, "shedding.retry_after: must be positive and at most 1h0m0s, got 2h0m0s"},
		{"bad name", "shedding: {max_in_flight: 10, classes: [{name: a, match: {host: x}}, {name: 'b c'}]}", `shedding.classes[1].name: identity: bad name: "b c"`},
		{"empty name", "shedding: {max_in_flight: 10, classes: [{name: a, match: {host: x}}, {}]}", `shedding.classes[1].name: identity: bad name: ""`},
		{"duplicate name", "shedding: {max_in_flight: 10, classes: [{name: a, match: {host: x}}, {name: a}]}", `shedding.classes[1].name: "a" already used by shedding.classes[0]`},
		{"bad method", "shedding: {max_in_flight: 10, classes: [{name: a, match: {methods: [get]}}, {name: b}]}", `shedding.classes[0].match.methods[0]: "get" is not an upper-case HTTP method`},
		{"bad path prefix", "shedding: {max_in_flight: 10, classes: [{name: a, match: {path_prefix: api}}, {name: b}]}", `shedding.classes[0].match.path_prefix: "api" must start with '/'`},
		{"catch-all not last", "shedding: {max_in_flight: 10, classes: [{name: a}, {name: b, match: {host: x}}]}", "shedding.classes[0].match: empty, it takes every request and shedding.classes[1] would never be reached; put it last"},
		{"negative target latency", "shedding:\n  max_in_flight: 10\n  target_latency: -1s\n" + two, "shedding.target_latency: must be 0 (off) or positive and at most 1h0m0s, got -1s"},
		{"target latency too long", "shedding:\n  max_in_flight: 10\n  target_latency: 2h\n" + two, "shedding.target_latency: must be 0 (off) or positive and at most 1h0m0s, got 2h0m0s"},
		{"target latency without max", "shedding: {target_latency: 100ms}", "shedding.max_in_flight: required (2 to 1073741824) when target_latency is set"},
		{"unknown field", "shedding: {max_in_flight: 10, level: 3}", "shedding.level: unknown field"},
		{"unknown class field", "shedding: {max_in_flight: 10, classes: [{name: a, priority: 1}]}", "shedding.classes[0].priority: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	var many string
	for i := range MaxShedClasses + 1 {
		many += "{name: c" + string(rune('a'+i)) + ", match: {host: x}}, "
	}
	_, err := Parse([]byte("shedding: {max_in_flight: 10, classes: [" + many + "]}"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shedding.classes: at most 16 classes, got 17")
}
