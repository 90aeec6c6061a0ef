package pop

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The judging peek of a new key must find room as counting it would, the
// memory budget included: otherwise, with the budget spent, a new key is
// judged as a key of its own (allowed) and then counted by the rule's
// shared counter of keys without room (denied), and an all-or-nothing
// request is denied after its earlier checks were counted, with no race.
func TestJudgeAndCountAgreeOnANewKeyWithoutRoom(t *testing.T) {
	rules := []Rule{
		{Name: "a", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeNode},
		{Name: "b", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopeNode},
	}
	n, err := New(Config{Self: replica("a", 1), Rules: rules, MaxMemory: 1 << 20, Shards: 1})
	require.NoError(t, err)
	_, err = n.Decide(t0, "b", "k", 1)
	require.NoError(t, err)
	long := func(i int) string { return strings.Repeat("x", 100) + strconv.Itoa(i) }
	// Fill the store with protected keys (spent past half their limit)
	// until a new key finds no room.
	untracked := 0
	for i := 0; i < 200000 && untracked < 10; i++ {
		d, err := n.Decide(t0, "a", long(i), 2)
		require.NoError(t, err)
		if d.Untracked {
			untracked++
		}
	}
	require.Equal(t, 10, untracked, "the budget is spent")
	h, _ := n.Handle("b")
	ha, _ := n.Handle("a")
	for j := range 3 { // spend the shared counter of keys without room
		_, err := n.Decide(t0, "a", long(500000+j), 1)
		require.NoError(t, err)
	}
	b0 := spent(t, n, "b", "k")
	req := Request{Combine: All, Checks: []Check{{Rule: h, Key: "k", Cost: 1}, {Rule: ha, Key: long(999999), Cost: 1}}}
	res := make([]Result, 2)
	o, err := n.DecideChecks(t0, &req, res)
	require.NoError(t, err)
	t.Logf("allowed %v counted %d; a: %+v", o.Allowed, o.Counted, res[1].Decision)
	require.False(t, o.Allowed, "a's new key is counted by the exhausted shared counter")
	assert.Equal(t, b0, spent(t, n, "b", "k"), "a denied all-or-nothing request spends nothing")
	assert.Equal(t, 0, o.Counted)
}
