package pop

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
)

// pipelineRules: two enforce rules, one shadow, one with a penalty box and
// one with tiers and two windows.
func pipelineRules() []Rule {
	return []Rule{
		{Name: "a", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeNode},
		{Name: "b", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopeNode},
		{Name: "s", Limit: 1, Window: time.Minute, Cost: 1, Scope: ScopeNode, Mode: Shadow},
		{Name: "box", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeNode, BlockFor: time.Hour},
		{Name: "tiered", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeNode,
			More:  []Limit{{Limit: 100, Window: time.Hour}},
			Tiers: map[string][]Limit{"gold": {{Limit: 10, Window: time.Minute}}}},
	}
}

func pipelineNode(t *testing.T) *Node {
	t.Helper()
	n, err := New(Config{Self: replica("a", 1), Rules: pipelineRules()})
	require.NoError(t, err)
	return n
}

func chk(t *testing.T, n *Node, rule, key string, cost uint64) Check {
	t.Helper()
	h, ok := n.Handle(rule)
	require.True(t, ok, rule)
	return Check{Rule: h, Key: key, Cost: cost}
}

// spent is what the key has spent in the rule's current window.
func spent(t *testing.T, n *Node, rule, key string) uint64 {
	t.Helper()
	v, err := n.View(t0, rule, key)
	require.NoError(t, err)
	var s uint64
	for _, w := range v.Windows {
		s += w.Total
	}
	return s
}

func decideChecks(t *testing.T, n *Node, req Request) (Outcome, []Result) {
	t.Helper()
	res := make([]Result, len(req.Checks))
	o, err := n.DecideChecks(t0, &req, res)
	require.NoError(t, err)
	return o, res
}

func TestDecideChecksAllCountsNothingOnADenial(t *testing.T) {
	n := pipelineNode(t)
	for range 3 {
		_, err := n.Decide(t0, "a", "k", 1)
		require.NoError(t, err)
	}
	o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "b", "k", 0), chk(t, n, "a", "k", 0), chk(t, n, "s", "k", 0)}})
	assert.False(t, o.Allowed)
	assert.Equal(t, 1, o.Binding, "the denying check binds")
	assert.Equal(t, 0, o.Counted)
	assert.Equal(t, uint64(0), spent(t, n, "b", "k"), "b's budget is not spent on a denied request")
	assert.Equal(t, uint64(0), spent(t, n, "s", "k"), "nor the shadow rule's")
	assert.True(t, res[0].Allowed, "b would fit")
	assert.Equal(t, uint64(5), res[0].Remaining, "an uncounted check says what is left as the key stands")
	assert.True(t, o.Stands(res, 1, All))
	assert.False(t, o.Stands(res, 0, All), "a check that neither counted nor denied does not stand for a denied request")
}

func TestDecideChecksAllCountsEveryCheckWhenAllFit(t *testing.T) {
	n := pipelineNode(t)
	o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "a", "k", 0), chk(t, n, "b", "k", 2), chk(t, n, "s", "k", 0)}})
	assert.True(t, o.Allowed)
	assert.Equal(t, 3, o.Counted)
	assert.Equal(t, 0, o.Binding, "a has 2 left, b 3")
	assert.Equal(t, uint64(2), res[0].Remaining)
	assert.Equal(t, uint64(3), res[1].Remaining)
	assert.Equal(t, uint64(1), spent(t, n, "a", "k"))
	assert.Equal(t, uint64(2), spent(t, n, "b", "k"))
	assert.Equal(t, uint64(1), spent(t, n, "s", "k"))
}

func TestDecideChecksShadowNeverDenies(t *testing.T) {
	n := pipelineNode(t)
	_, err := n.Decide(t0, "s", "k", 1)
	require.NoError(t, err)
	for _, c := range []Combine{Each, All} {
		o, res := decideChecks(t, n, Request{Combine: c, Checks: []Check{chk(t, n, "s", "k", 0), chk(t, n, "a", "k", 0)}})
		assert.True(t, o.Allowed)
		assert.True(t, res[0].ShadowDenied)
		assert.Equal(t, 1, o.Binding, "a shadow check never binds")
	}
}

func TestDecideChecksAllSumsTheCostsOfOneKey(t *testing.T) {
	n := pipelineNode(t)
	// Two checks of a/k at 2 each: 4 > 3, though each fits alone.
	o, _ := decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "a", "k", 2), chk(t, n, "b", "k", 1), chk(t, n, "a", "k", 2)}})
	assert.False(t, o.Allowed)
	assert.Equal(t, uint64(0), spent(t, n, "a", "k"))
	assert.Equal(t, uint64(0), spent(t, n, "b", "k"))

	// Strict, a sum over the rule's largest limit is an error naming the check.
	res := make([]Result, 2)
	_, err := n.DecideChecks(t0, &Request{Combine: All, Strict: true, Checks: []Check{chk(t, n, "a", "k", 2), chk(t, n, "a", "k", 2)}}, res)
	var ce *CheckError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 1, ce.Index)
	assert.Equal(t, uint64(4), ce.Sum)
	assert.ErrorIs(t, err, ErrSumOverLimit)
}

func TestDecideChecksSumsManyChecksAsAFewDo(t *testing.T) {
	// Past smallSum checks the sums come from a sort: the same answer.
	n := pipelineNode(t)
	var cs []Check
	for i := range 40 {
		cs = append(cs, chk(t, n, "b", string(rune('a'+i%20)), 1))
	}
	cs = append(cs, chk(t, n, "b", "a", 4)) // a: 1+1+4 = 6 > 5
	res := make([]Result, len(cs))
	_, err := n.DecideChecks(t0, &Request{Combine: All, Strict: true, Checks: cs}, res)
	var ce *CheckError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 40, ce.Index)
	assert.Equal(t, uint64(6), ce.Sum)
	cs[40].Cost = 3 // 5: fits
	o, err := n.DecideChecks(t0, &Request{Combine: All, Strict: true, Checks: cs}, res)
	require.NoError(t, err)
	assert.True(t, o.Allowed)
	assert.Equal(t, 41, o.Counted)
	assert.Equal(t, uint64(5), spent(t, n, "b", "a"))
}

func TestDecideChecksStrictRefusesBadChecksBeforeDeciding(t *testing.T) {
	n := pipelineNode(t)
	tests := []struct {
		name string
		bad  Check
		want error
	}{
		{"zero handle", Check{Key: "k"}, ErrUnknownRule},
		{"empty key", chk(t, n, "a", "", 0), ErrEmptyKey},
		{"long key", chk(t, n, "a", strings.Repeat("k", crdt.MaxKeyLen+1), 0), ErrKeyTooLong},
		{"cost over limit", chk(t, n, "a", "k", 4), ErrCostOverLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []Combine{Each, All} {
				res := make([]Result, 2)
				_, err := n.DecideChecks(t0, &Request{Combine: c, Strict: true, Checks: []Check{chk(t, n, "b", "k", 0), tt.bad}}, res)
				var ce *CheckError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, 1, ce.Index)
				assert.ErrorIs(t, err, tt.want)
				assert.Equal(t, uint64(0), spent(t, n, "b", "k"), "nothing counted before the bad check")
			}
		})
	}
}

func TestDecideChecksLenientSkipsBadChecksAndDeniesCostsThatNeverFit(t *testing.T) {
	n := pipelineNode(t)
	o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{{Key: "k"}, chk(t, n, "b", "k", 0)}})
	assert.True(t, o.Allowed)
	assert.ErrorIs(t, res[0].Err, ErrUnknownRule)
	assert.False(t, o.Stands(res, 0, All))
	assert.Equal(t, uint64(1), spent(t, n, "b", "k"))

	o, res = decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "a", "k", 9), chk(t, n, "b", "k", 0)}})
	assert.False(t, o.Allowed)
	assert.Equal(t, 0, o.Binding)
	assert.GreaterOrEqual(t, res[0].RetryAfter, time.Minute, "a cost that never fits waits at least the window")
	assert.Equal(t, uint64(1), spent(t, n, "b", "k"), "nothing more counted")
}

func TestDecideChecksProbeIsJudgedButNeverCounted(t *testing.T) {
	n := pipelineNode(t)
	p := chk(t, n, "a", "k", 0)
	p.Probe = true
	o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{p, chk(t, n, "b", "k", 0)}})
	assert.True(t, o.Allowed)
	assert.False(t, res[0].Counted)
	assert.Equal(t, uint64(0), spent(t, n, "a", "k"))
	assert.Equal(t, uint64(1), spent(t, n, "b", "k"))
	for range 3 {
		_, err := n.Decide(t0, "a", "k", 1)
		require.NoError(t, err)
	}
	o, _ = decideChecks(t, n, Request{Combine: All, Checks: []Check{p, chk(t, n, "b", "k", 0)}})
	assert.False(t, o.Allowed, "a probe that would be denied denies the request")
	assert.Equal(t, uint64(1), spent(t, n, "b", "k"))
}

func TestDecideChecksEachDecidesOnItsOwn(t *testing.T) {
	n := pipelineNode(t)
	for range 3 {
		_, err := n.Decide(t0, "a", "k", 1)
		require.NoError(t, err)
	}
	o, res := decideChecks(t, n, Request{Combine: Each, Checks: []Check{chk(t, n, "a", "k", 0), chk(t, n, "b", "k", 0), chk(t, n, "b", "k", 0)}})
	assert.False(t, o.Allowed)
	assert.Equal(t, 2, o.Counted)
	assert.False(t, res[0].Allowed)
	assert.Equal(t, uint64(3), res[2].Remaining)
	assert.Equal(t, uint64(2), spent(t, n, "b", "k"))
	for i := range res {
		assert.True(t, o.Stands(res, i, Each))
	}
}

func TestDecideChecksPenalizesAJudgedDenial(t *testing.T) {
	n := pipelineNode(t)
	for range 2 {
		_, err := n.Decide(t0, "box", "k", 1)
		require.NoError(t, err)
	}
	o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "box", "k", 0), chk(t, n, "b", "k", 0)}})
	assert.False(t, o.Allowed)
	assert.True(t, res[0].BlockStarted, "a denial judged without counting starts the block as a counted one does")
	assert.Equal(t, time.Hour, res[0].RetryAfter)
	assert.NotZero(t, n.BlockedUntil(t0, "box", "k"))
}

func TestDecideChecksTiers(t *testing.T) {
	n := pipelineNode(t)
	c := chk(t, n, "tiered", "k", 0)
	c.Tier = "gold"
	for i := range 10 {
		o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{c}})
		require.True(t, o.Allowed, "gold admits 10 a minute: request %d", i)
		assert.Equal(t, uint64(10), res[0].Limit)
	}
	o, _ := decideChecks(t, n, Request{Combine: All, Checks: []Check{c}})
	assert.False(t, o.Allowed)
	c.Tier = ""
	c.Key = "other"
	_, res := decideChecks(t, n, Request{Combine: Each, Checks: []Check{c, c, c}})
	assert.Equal(t, []bool{true, true, false}, []bool{res[0].Allowed, res[1].Allowed, res[2].Allowed}, "the rule's own limit without a tier")
}

func TestDecideChecksRaceStopsCounting(t *testing.T) {
	n := pipelineNode(t)
	req := Request{Combine: All, Checks: []Check{chk(t, n, "b", "k", 0), chk(t, n, "a", "k", 0)}}
	setBeforeCount(t, func() {
		for range 3 { // another request takes a's last units
			_, err := n.Decide(t0, "a", "k", 1)
			require.NoError(t, err)
		}
	})
	o, res := decideChecks(t, n, req)
	assert.False(t, o.Allowed)
	assert.Equal(t, 1, o.Binding)
	assert.True(t, res[0].Counted, "the check before the lost race stays counted")
	assert.Equal(t, 1, o.Counted)
	assert.False(t, o.Stands(res, 0, All) && !res[0].Counted)
}

func TestDecideChecksRemovedRule(t *testing.T) {
	n := pipelineNode(t)
	c := chk(t, n, "a", "k", 0)
	require.NoError(t, n.SetRules(pipelineRules()[1:]))
	// Retired, the rule's handle still decides for two windows.
	o, res := decideChecks(t, n, Request{Combine: Each, Checks: []Check{c}})
	require.NoError(t, res[0].Err)
	assert.True(t, o.Allowed)
	c.Rule.r.dropped.Store(true)
	_, err := n.DecideChecks(t0, &Request{Combine: Each, Strict: true, Checks: []Check{c}}, make([]Result, 1))
	assert.True(t, errors.Is(err, ErrUnknownRule))
}

// DecideCheck is DecideChecks of one strict check, Each.
func TestDecideCheckIsOneCheckOfThePipeline(t *testing.T) {
	a, b := pipelineNode(t), pipelineNode(t)
	for i := range 6 {
		var got Result
		errA := a.DecideCheck(t0, chk(t, a, "a", "k", 0), &got)
		want := make([]Result, 1)
		_, errB := b.DecideChecks(t0, &Request{Combine: Each, Strict: true, Checks: []Check{chk(t, b, "a", "k", 0)}}, want)
		require.NoError(t, errA)
		require.NoError(t, errB)
		assert.Equal(t, want[0].Decision, got.Decision, "request %d", i)
		assert.Equal(t, want[0].Counted, got.Counted)
	}
	var res Result
	assert.ErrorIs(t, a.DecideCheck(t0, chk(t, a, "a", "k", 9), &res), ErrCostOverLimit)
	assert.ErrorIs(t, a.DecideCheck(t0, Check{Key: "k"}, &res), ErrUnknownRule)
}

// A request is decided against the rule table its handles were resolved
// in: a reload that removes its rule between the judging and the counts
// neither fails it half-counted nor loses its counts.
func TestDecideChecksReloadBetweenJudgeAndCount(t *testing.T) {
	n := pipelineNode(t)
	req := Request{Combine: All, Checks: []Check{chk(t, n, "b", "k", 0), chk(t, n, "b", "k", 2)}}
	setBeforeCount(t, func() { require.NoError(t, n.SetRules(pipelineRules()[:1])) })
	o, res := decideChecks(t, n, req)
	require.True(t, o.Allowed)
	assert.Equal(t, 2, o.Counted)
	assert.True(t, res[0].Counted && res[1].Counted)
	setBeforeCount(t, nil)
	require.NoError(t, n.SetRules(pipelineRules()))
	assert.Equal(t, uint64(3), spent(t, n, "b", "k"), "the request's counts were kept and restored")
}
