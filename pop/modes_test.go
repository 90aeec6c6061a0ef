package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

func setMode(t *testing.T, n *Node, now int64, rule, mode string) modes.RuleMode {
	t.Helper()
	m, err := ParseRuleMode(mode)
	require.NoError(t, err)
	w, err := n.SetRuleMode(now, rule, m)
	require.NoError(t, err)
	return w
}

func TestParseRuleMode(t *testing.T) {
	for _, s := range []string{"config", "enforce", "shadow", "off"} {
		m, err := ParseRuleMode(s)
		require.NoError(t, err)
		assert.Equal(t, s, RuleModeName(m))
	}
	for _, s := range []string{"", "Off", "disabled", "enforce "} {
		_, err := ParseRuleMode(s)
		assert.ErrorIs(t, err, ErrBadMode, s)
	}
}

// TestModeOffDecidesNothing: a rule switched off admits everything,
// counts nothing and starts no block; cleared, it enforces its counts
// again.
func TestModeOffDecidesNothing(t *testing.T) {
	n := pipelineNode(t)
	for i := 0; i < 3; i++ {
		d, err := n.Decide(t0, "a", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, _ := n.Decide(t0, "a", "k", 1)
	require.False(t, d.Allowed, "the limit is spent")

	setMode(t, n, t0, "a", "off")
	for i := 0; i < 10; i++ {
		d, err := n.Decide(t0, "a", "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.True(t, d.Off)
		assert.Equal(t, uint64(3), d.Limit)
		assert.Equal(t, uint64(3), d.Remaining)
	}
	_, err := n.Decide(t0, "a", "", 1)
	assert.ErrorIs(t, err, ErrEmptyKey, "bad requests are still refused")
	assert.Equal(t, uint64(3), spent(t, n, "a", "k"), "nothing counted while off")

	// The penalty box is not consulted either.
	for i := 0; i < 3; i++ {
		_, _ = n.Decide(t0, "box", "k", 1)
	}
	setMode(t, n, t0, "box", "off")
	d, _ = n.Decide(t0, "box", "k", 1)
	assert.True(t, d.Allowed && d.Off && !d.Blocked)

	setMode(t, n, t0+1, "a", "config")
	d, _ = n.Decide(t0, "a", "k", 1)
	assert.False(t, d.Allowed, "cleared: the rule's own mode again")
	assert.False(t, d.Off)

	// Two windows on, the counts would admit; the block (an hour) does not.
	setMode(t, n, t0+1, "box", "enforce")
	d, _ = n.Decide(t0+int64(2*time.Minute), "box", "k", 1)
	assert.False(t, d.Allowed || d.Off, "on again: the penalty box is consulted again")
	assert.True(t, d.Blocked)
}

func TestModeShadowAndEnforce(t *testing.T) {
	n := pipelineNode(t)
	setMode(t, n, t0, "a", "shadow")
	for i := 0; i < 5; i++ {
		d, err := n.Decide(t0, "a", "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, i >= 3, d.ShadowDenied, "request %d", i)
	}
	assert.Equal(t, uint64(3), spent(t, n, "a", "k"), "shadow counts what it admits")

	// The shadow rule "s" (limit 1) enforced.
	setMode(t, n, t0, "s", "enforce")
	d, _ := n.Decide(t0, "s", "k", 1)
	assert.True(t, d.Allowed)
	d, _ = n.Decide(t0, "s", "k", 1)
	assert.False(t, d.Allowed)
	assert.False(t, d.ShadowDenied)
}

// TestModeOffInPipeline: a check of a rule switched off is answered
// allowed, counts nothing and never binds, each on its own or all or
// nothing; a cost it could never admit is allowed too.
func TestModeOffInPipeline(t *testing.T) {
	n := pipelineNode(t)
	setMode(t, n, t0, "b", "off")
	o, res := decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "a", "k", 1), chk(t, n, "b", "k", 1)}})
	assert.True(t, o.Allowed)
	assert.Equal(t, 0, o.Binding, "the off check never binds")
	assert.Equal(t, 1, o.Counted)
	assert.True(t, res[1].Off)
	assert.False(t, res[1].Counted)
	assert.Zero(t, spent(t, n, "b", "k"))

	// All or nothing: the enforce check denies; the off check is not what
	// binds.
	for i := 0; i < 2; i++ {
		_, _ = n.Decide(t0, "a", "k", 1)
	}
	o, res = decideChecks(t, n, Request{Combine: All, Checks: []Check{chk(t, n, "b", "k", 1), chk(t, n, "a", "k", 1)}})
	assert.False(t, o.Allowed)
	assert.Equal(t, 1, o.Binding)
	assert.True(t, res[0].Off)

	// Only off checks: allowed, nothing binds.
	o, _ = decideChecks(t, n, Request{Combine: Each, Checks: []Check{chk(t, n, "b", "k", 1), chk(t, n, "b", "k2", 99)}})
	assert.True(t, o.Allowed)
	assert.Equal(t, -1, o.Binding)

	var r Result
	require.NoError(t, n.DecideCheck(t0, chk(t, n, "b", "k", 2), &r))
	assert.True(t, r.Allowed && r.Off && !r.Counted)
}

// TestModeLastWriterWins: writes merge by time, then writer, in any order;
// an older write changes nothing; a local write always wins locally.
func TestModeLastWriterWins(t *testing.T) {
	a, b := newNode(t, replica("a", 1)), newNode(t, replica("b", 1))
	wOff := setMode(t, a, t0, "api", "off")
	wShadow := setMode(t, b, t0+int64(time.Second), "api", "shadow")
	for _, order := range [][]modes.RuleMode{{wOff, wShadow}, {wShadow, wOff}} {
		n := newNode(t, replica("c", 1))
		for _, w := range order {
			n.Link().MergeModes(t0+int64(2*time.Second), modes.Source{Member: true}, []modes.RuleMode{w})
		}
		st, ok := n.RuleMode("api")
		require.True(t, ok)
		assert.Equal(t, Shadow, st.Effective)
		assert.Equal(t, wShadow, *st.Set)
	}
	a.Link().MergeModes(t0+int64(2*time.Second), modes.Source{Member: true}, []modes.RuleMode{wShadow})
	b.Link().MergeModes(t0+int64(2*time.Second), modes.Source{Member: true}, []modes.RuleMode{wOff})
	assert.Equal(t, a.Link().Modes(), b.Link().Modes(), "converged")
	assert.Equal(t, uint64(1), b.Stats().Modes.Unchanged)

	// A write at a time older than the one held still wins where it is
	// made: it is dated just after.
	w := setMode(t, a, t0, "api", "enforce")
	assert.Equal(t, wShadow.At+1, w.At)
	b.Link().MergeModes(t0+int64(2*time.Second), modes.Source{Member: true}, []modes.RuleMode{w})
	st, _ := b.RuleMode("api")
	assert.Equal(t, Enforce, st.Effective)
}

// TestModeFutureRefused: a write dated beyond now + MaxSkew is refused,
// not clamped, and taken once it is no longer in the future.
func TestModeFutureRefused(t *testing.T) {
	n := newNode(t, replica("a", 1))
	w := modes.RuleMode{Rule: "api", Mode: modes.Off, At: t0 + int64(time.Hour), By: replica("evil", 1)}
	n.Link().MergeModes(t0, modes.Source{Member: true}, []modes.RuleMode{w})
	st, _ := n.RuleMode("api")
	assert.Equal(t, Enforce, st.Effective)
	assert.Equal(t, uint64(1), n.Stats().Modes.Future)
	n.Link().MergeModes(t0+int64(time.Hour)-int64(time.Second), modes.Source{Member: true}, []modes.RuleMode{w})
	st, _ = n.RuleMode("api")
	assert.Equal(t, Off, st.Effective, "within MaxSkew of now")

	for _, bad := range []modes.RuleMode{
		{Rule: "api", Mode: 7, At: t0, By: replica("x", 1)},
		{Rule: "", Mode: 1, At: t0, By: replica("x", 1)},
		{Rule: "api", Mode: 1, At: t0, By: identity.Replica{Node: "x"}},
	} {
		n.Link().MergeModes(t0, modes.Source{Member: true}, []modes.RuleMode{bad})
	}
	assert.Equal(t, uint64(3), n.Stats().Modes.Refused)
}

// TestModeOrphans: writes for unknown rules are kept up to MaxOrphanModes,
// apply when the rule is loaded, survive a reload that removes the rule,
// and a reload that leaves too many drops the oldest.
func TestModeOrphans(t *testing.T) {
	n := newNode(t, replica("a", 1))
	var ws []modes.RuleMode
	for i := 0; i < MaxOrphanModes+10; i++ {
		ws = append(ws, modes.RuleMode{Rule: "gone-" + strconv.Itoa(i), Mode: modes.Off, At: t0 + int64(i), By: replica("b", 1)})
	}
	n.Link().MergeModes(t0+int64(time.Second), modes.Source{Member: true}, ws)
	assert.Equal(t, uint64(10), n.Stats().Modes.Refused)
	assert.Len(t, n.Link().Modes(), MaxOrphanModes)
	// A write for a held orphan still merges.
	newer := ws[0]
	newer.At, newer.Mode = t0+int64(time.Second), modes.Shadow
	n.Link().MergeModes(t0+int64(time.Second), modes.Source{Member: true}, []modes.RuleMode{newer})
	assert.Equal(t, uint64(1), n.Stats().Modes.Merged-uint64(MaxOrphanModes))

	// The rule is loaded: the write applies at once.
	rules := append(testRules(), Rule{Name: "gone-0", Limit: 1, Window: time.Minute, Cost: 1})
	require.NoError(t, n.SetRules(rules))
	st, ok := n.RuleMode("gone-0")
	require.True(t, ok)
	assert.False(t, st.Orphaned)
	assert.Equal(t, Shadow, st.Effective)
	d, _ := n.Decide(t0, "gone-0", "k", 1)
	d, _ = n.Decide(t0, "gone-0", "k", 1)
	assert.True(t, d.Allowed && d.ShadowDenied)

	// A local override survives a reload that removes its rule, orphaned,
	// and applies again when the rule comes back.
	setMode(t, n, t0+int64(2*time.Second), "api", "off")
	require.NoError(t, n.SetRules(testRules()[1:]))
	st, ok = n.RuleMode("api")
	require.True(t, ok)
	assert.True(t, st.Orphaned)
	assert.Len(t, n.Link().Modes(), MaxOrphanModes, "the oldest orphan was dropped for it")
	assert.Equal(t, uint64(1), n.Stats().Modes.Dropped)
	_, err := n.SetRuleMode(t0, "api", modes.Off)
	assert.ErrorIs(t, err, ErrUnknownRule, "only clearing an orphan is allowed")
	require.NoError(t, n.SetRules(testRules()))
	d, _ = n.Decide(t0, "api", "k", 1)
	assert.True(t, d.Off)

	_, err = n.SetRuleMode(t0, "nope", modes.Config)
	assert.ErrorIs(t, err, ErrUnknownRule)
}

// TestModeReloadKeepsOverride: a reload of the same rules keeps the mode
// set at run time before any decision sees the new table.
func TestModeReloadKeepsOverride(t *testing.T) {
	n := newNode(t, replica("a", 1))
	setMode(t, n, t0, "watch", "enforce")
	rules := testRules()
	rules[3].Limit = 1
	require.NoError(t, n.SetRules(rules))
	d, _ := n.Decide(t0, "watch", "k", 1)
	require.True(t, d.Allowed)
	d, _ = n.Decide(t0, "watch", "k", 1)
	assert.False(t, d.Allowed, "still enforced after the reload")
	st, _ := n.RuleMode("watch")
	assert.Equal(t, Shadow, st.Own)
	assert.Equal(t, Enforce, st.Effective)
}

func TestTakeModes(t *testing.T) {
	n := newNode(t, replica("a", 1))
	assert.Nil(t, n.Link().TakeModes())
	setMode(t, n, t0, "api", "off")
	w := setMode(t, n, t0+1, "api", "shadow")
	n.Link().MergeModes(t0, modes.Source{Member: true}, []modes.RuleMode{{Rule: "local", Mode: modes.Off, At: t0, By: replica("b", 1)}})
	assert.Equal(t, []modes.RuleMode{w}, n.Link().TakeModes(), "own writes only, as they stand")
	assert.Nil(t, n.Link().TakeModes())
}

// TestModesPersist: a state file's snapshot carries the modes; a new
// incarnation restores them.
func TestModesPersist(t *testing.T) {
	n := newNode(t, replica("a", 1))
	w := setMode(t, n, t0, "api", "off")
	_, _ = n.Decide(t0, "per-ip", "k", 1)
	var ds []wire.Delta
	for d := range n.SnapshotEach(t0) {
		c := *d
		c.Entries = append([]crdt.Entry(nil), d.Entries...)
		ds = append(ds, c)
		for _, m := range modes.Section.Items(d) {
			assert.Equal(t, w, m)
		}
	}
	// Through the wire format, as the state file holds it.
	var back []wire.Delta
	for i := range ds {
		msgs, err := wire.Encode(&ds[i], 0)
		require.NoError(t, err)
		for _, b := range msgs {
			d, err := wire.Decode(b)
			require.NoError(t, err)
			back = append(back, *d)
		}
	}
	m := newNode(t, replica("a", 2))
	m.Restore(t0+int64(time.Second), back)
	st, _ := m.RuleMode("api")
	assert.Equal(t, Off, st.Effective)
	assert.Equal(t, w, *st.Set)
}
