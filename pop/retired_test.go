package pop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rule removed by a reload and restored within two of its windows goes on
// with its counts; restored later, it starts empty.
func TestRemovedRuleKeepsCountsForTwoWindows(t *testing.T) {
	n := newNode(t, replica("a", 1))
	admitAll(t, n, t0, "api", "k", 10)
	d, err := n.Decide(t0, "api", "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)

	all := testRules()
	require.NoError(t, n.SetRules(all[1:])) // "api" removed (a truncated file)
	assert.Equal(t, []string{"api"}, n.Retired())
	_, err = n.Decide(t0, "api", "k", 1)
	assert.ErrorIs(t, err, ErrUnknownRule)
	now := t0 + int64(time.Second)
	n.Tick(now)                         // the two windows start
	require.NoError(t, n.SetRules(all)) // the file put right
	d, err = n.Decide(now, "api", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a restored rule must not admit its limit again")
	assert.Empty(t, n.Retired())

	// Removed again, restored after two windows: empty.
	require.NoError(t, n.SetRules(all[1:]))
	n.Tick(now)
	later := now + int64(2*time.Minute)
	n.Tick(later)
	assert.Empty(t, n.Retired(), "dropped after two windows")
	require.NoError(t, n.SetRules(all))
	d, err = n.Decide(later, "api", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.InDelta(t, 1, estimate(t, n, later, "api", "k"), 0.01)
}

// A rule set again with another window starts empty, and its counts under
// the former window come back if the window is put back.
func TestWindowChangeRetiresFormerCounts(t *testing.T) {
	n := newNode(t, replica("a", 1))
	admitAll(t, n, t0, "api", "k", 4)
	rules := testRules()
	rules[0].Window = 2 * time.Minute
	require.NoError(t, n.SetRules(rules))
	assert.Zero(t, estimate(t, n, t0, "api", "k"))
	require.NoError(t, n.SetRules(testRules()))
	assert.InDelta(t, 4, estimate(t, n, t0, "api", "k"), 0.01)
}
