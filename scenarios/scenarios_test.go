package scenarios_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/scenarios"
	"github.com/geolimit/geolimit/sim"
)

// Every built-in scenario parses and validates.
func TestBuiltInScenariosParse(t *testing.T) {
	names := scenarios.Names()
	require.Contains(t, names, "two-regions-cut")
	require.Contains(t, names, "scale/edge-10pops")
	for _, n := range names {
		b, ok := scenarios.Get(n)
		require.True(t, ok, n)
		_, err := sim.Parse(b)
		assert.NoError(t, err, n)
	}
	_, ok := scenarios.Get("two-regions-cut.yaml")
	assert.True(t, ok, "with the extension too")
	_, ok = scenarios.Get("no-such")
	assert.False(t, ok)
}
