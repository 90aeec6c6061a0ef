package pop

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gcraRule() Rule {
	// One request every 100ms, 3 at once.
	return Rule{Name: "pace", Limit: 10, Window: time.Second, Cost: 1, Scope: ScopeNode, Algorithm: GCRA, Burst: 3}
}

func TestGCRAValidation(t *testing.T) {
	ok := gcraRule()
	for _, tc := range []struct {
		name string
		edit func(r *Rule)
		want string
	}{
		{"burst of a sliding window rule", func(r *Rule) { r.Algorithm = SlidingWindow }, "rules[0].burst: only an algorithm: gcra rule has a burst"},
		{"unknown algorithm", func(r *Rule) { r.Algorithm = 7 }, "rules[0].algorithm: unknown algorithm 7"},
		{"burst over limit", func(r *Rule) { r.Burst = 11 }, "rules[0].burst: 11 exceeds limit 10"},
		{"cost over burst", func(r *Rule) { r.Cost = 4 }, "rules[0].cost: 4 exceeds burst 3"},
		{"interval under 1µs", func(r *Rule) { r.Limit, r.Burst, r.Window = 2000, 0, time.Millisecond }, "rules[0].limit: a gcra rule paces one unit every window/limit, which must be at least 1µs: limit at most 1000 for window 1ms"},
		{"several windows", func(r *Rule) { r.More = []Limit{{Limit: 100, Window: time.Minute}} }, "rules[0].limits: an algorithm: gcra rule has one rate"},
		{"overrides", func(r *Rule) { r.Overrides = []Override{{Key: "k", Limits: []Limit{{Limit: 5, Window: time.Second}}}} }, "rules[0].overrides: not supported"},
		{"tiers", func(r *Rule) { r.Tiers = map[string][]Limit{"gold": {{Limit: 5, Window: time.Second}}} }, "rules[0].tiers: not supported"},
		{"share", func(r *Rule) { r.Scope, r.OnPartition = ScopeGlobal, Share }, "rules[0].on_partition: an algorithm: gcra rule keeps pacing on what each side sees"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := ValidateRules([]Rule{r})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, ValidateRules([]Rule{ok}))
	for _, s := range []Scope{ScopePoP, ScopeGlobal} {
		r := ok
		r.Scope = s
		require.NoError(t, ValidateRules([]Rule{r}), "scope %s", s)
	}
	def := ok
	def.Burst = 0
	require.NoError(t, ValidateRules([]Rule{def}))
	assert.Equal(t, uint64(10), def.BurstOf(), "burst defaults to the limit")
	assert.Equal(t, uint64(10), def.MaxCost())
}

func TestGCRADecide(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{gcraRule()}})
	require.NoError(t, err)
	ms := time.Millisecond
	type step struct {
		at        time.Duration
		allowed   bool
		remaining uint64
		reset     time.Duration
		retry     time.Duration
	}
	for i, s := range []step{
		{0, true, 2, 100 * ms, 0},
		{0, true, 1, 200 * ms, 0},
		{10 * ms, true, 0, 290 * ms, 0},
		{20 * ms, false, 0, 280 * ms, 80 * ms},
		{100 * ms, true, 0, 300 * ms, 0},
		{150 * ms, false, 0, 250 * ms, 50 * ms},
		{1000 * ms, true, 2, 100 * ms, 0},
	} {
		d, err := n.Decide(t0+int64(s.at), "pace", "k", 1)
		require.NoError(t, err)
		assert.Equal(t, s.allowed, d.Allowed, "step %d", i)
		assert.Equal(t, s.remaining, d.Remaining, "step %d remaining", i)
		assert.Equal(t, s.reset, d.Reset, "step %d reset", i)
		assert.Equal(t, s.retry, d.RetryAfter, "step %d retry", i)
		assert.Equal(t, uint64(10), d.Limit)
	}
	v, err := n.View(t0+int64(1000*ms), "pace", "k")
	require.NoError(t, err)
	assert.Equal(t, t0+int64(1100*ms), v.TAT)
	assert.InDelta(t, 1.0, v.Estimate, 1e-9)
	assert.Empty(t, v.Windows)

	_, err = n.Decide(t0, "pace", "k", 4)
	assert.ErrorIs(t, err, ErrCostOverLimit, "a cost over the burst can never be admitted")
}

func TestGCRAPeekAndChecks(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{gcraRule(),
		{Name: "window", Limit: 100, Window: time.Minute, Cost: 1, Scope: ScopeNode}}})
	require.NoError(t, err)
	for range 5 {
		d, err := n.Peek(t0, "pace", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	pace, _ := n.Handle("pace")
	win, _ := n.Handle("window")
	res := make([]Result, 2)
	// All or nothing: the GCRA check of cost 3 spends the burst.
	out, err := n.DecideChecks(t0, &Request{Combine: All, Checks: []Check{{Rule: pace, Key: "k", Cost: 3}, {Rule: win, Key: "k", Cost: 1}}}, res)
	require.NoError(t, err)
	require.True(t, out.Allowed)
	assert.Equal(t, 2, out.Counted)
	// Now the GCRA check denies, and the window's is not counted.
	out, err = n.DecideChecks(t0, &Request{Combine: All, Checks: []Check{{Rule: pace, Key: "k", Cost: 1}, {Rule: win, Key: "k", Cost: 1}}}, res)
	require.NoError(t, err)
	assert.False(t, out.Allowed)
	assert.Equal(t, 0, out.Binding)
	assert.Equal(t, 100*time.Millisecond, res[0].RetryAfter)
	d, err := n.Peek(t0, "window", "k", 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(98), d.Remaining, "only the allowed request was counted")
	// Each on its own: the window's is counted.
	out, err = n.DecideChecks(t0, &Request{Combine: Each, Checks: []Check{{Rule: pace, Key: "k", Cost: 1}, {Rule: win, Key: "k", Cost: 1}}}, res)
	require.NoError(t, err)
	assert.Equal(t, 1, out.Counted)
	assert.False(t, res[0].Allowed)
	assert.True(t, res[1].Allowed)
}

func TestGCRAShadowAndPenaltyBox(t *testing.T) {
	shadow := gcraRule()
	shadow.Name, shadow.Mode = "shadow", Shadow
	boxed := gcraRule()
	boxed.Name, boxed.BlockFor = "boxed", 5*time.Second
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{shadow, boxed}})
	require.NoError(t, err)
	for i := range 4 {
		d, err := n.Decide(t0, "shadow", "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, i == 3, d.ShadowDenied, "request %d", i)
	}
	for range 3 {
		d, _ := n.Decide(t0, "boxed", "k", 1)
		require.True(t, d.Allowed)
	}
	d, _ := n.Decide(t0, "boxed", "k", 1)
	require.False(t, d.Allowed)
	assert.True(t, d.BlockStarted)
	d, _ = n.Decide(t0+int64(time.Second), "boxed", "k", 1)
	assert.False(t, d.Allowed, "the pace has room again but the key is in the penalty box")
	assert.True(t, d.Blocked)
}

// TestGCRAConcurrentNeverExceedsBurst: racing decisions of one key admit
// exactly the burst at one instant.
func TestGCRAConcurrentNeverExceedsBurst(t *testing.T) {
	r := gcraRule()
	r.Limit, r.Burst, r.Window = 1000, 500, time.Hour
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{r}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := 0
			for range 200 {
				if d, err := n.Decide(t0, "pace", "hot", 1); err == nil && d.Allowed {
					local++
				}
			}
			mu.Lock()
			admitted += local
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, 500, admitted)
}

// TestGCRAAlgorithmChangeStartsAfresh: a rule set again with another
// algorithm (or another burst) does not read the former state as its own.
func TestGCRAAlgorithmChangeStartsAfresh(t *testing.T) {
	win := Rule{Name: "pace", Limit: 10, Window: time.Second, Cost: 1, Scope: ScopeNode}
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{gcraRule()}})
	require.NoError(t, err)
	for range 3 {
		d, _ := n.Decide(t0, "pace", "k", 1)
		require.True(t, d.Allowed)
	}
	require.NoError(t, n.SetRules([]Rule{win}))
	d, err := n.Decide(t0, "pace", "k", 1)
	require.NoError(t, err)
	assert.Equal(t, uint64(9), d.Remaining, "the TAT is not read as a count")
	// Back to GCRA: the window's counts are not read as a TAT, and the
	// retired TAT is not taken back under another burst.
	other := gcraRule()
	other.Burst = 2
	require.NoError(t, n.SetRules([]Rule{other}))
	d, err = n.Decide(t0, "pace", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, uint64(1), d.Remaining)
	// An unchanged GCRA rule keeps its TATs across a reload.
	require.NoError(t, n.SetRules([]Rule{other}))
	d, _ = n.Decide(t0, "pace", "k", 1)
	assert.True(t, d.Allowed)
	d, _ = n.Decide(t0, "pace", "k", 1)
	assert.False(t, d.Allowed)
}

func TestGCRAKeysAreSweptWhenIdle(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{gcraRule()}})
	require.NoError(t, err)
	_, err = n.Decide(t0, "pace", "k", 3)
	require.NoError(t, err)
	n.Tick(t0 + int64(100*time.Millisecond))
	require.Equal(t, 1, n.store.Stats().Keys)
	n.Tick(t0 + int64(time.Second))
	assert.Equal(t, 0, n.store.Stats().Keys, "a key back to its full burst is dropped")
	d, _ := n.Decide(t0+int64(time.Second), "pace", "k", 3)
	assert.True(t, d.Allowed)
}

// TestGCRANotInSnapshots: a GCRA rule's TATs are not counts; a state file
// holds none and a restore merges none.
func TestGCRANotInSnapshots(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{gcraRule()}})
	require.NoError(t, err)
	_, err = n.Decide(t0, "pace", "k", 3)
	require.NoError(t, err)
	for _, d := range n.Snapshot(t0) {
		assert.Empty(t, d.Entries)
	}
}
