package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/wire"
)

func boxRules() []Rule {
	return []Rule{
		{Name: "login", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, BlockFor: 10 * time.Minute},
		{Name: "otp", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopePoP, BlockFor: 10 * time.Minute},
		{Name: "local", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeNode, BlockFor: 10 * time.Minute},
		{Name: "watch", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, BlockFor: 10 * time.Minute, Mode: Shadow},
		{Name: "plain", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
	}
}

func boxNode(t *testing.T, self identity.Replica) *Node {
	t.Helper()
	n, err := New(Config{Self: self, Rules: boxRules()})
	require.NoError(t, err)
	n.Link().SetEpoch(1)
	return n
}

// exhaust spends rule's limit of 3 for key at now and returns the decision
// of the request after.
func exhaust(t *testing.T, n *Node, now int64, rule, key string) Decision {
	t.Helper()
	for i := 0; i < 3; i++ {
		d, err := n.Decide(now, rule, key, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "request %d", i)
		require.False(t, d.Blocked)
	}
	d, err := n.Decide(now, rule, key, 1)
	require.NoError(t, err)
	return d
}

func TestPenaltyBoxDeniesUntilItEnds(t *testing.T) {
	n := boxNode(t, replica("a", 1))
	d := exhaust(t, n, t0, "login", "alice")
	assert.False(t, d.Allowed)
	assert.True(t, d.Blocked)
	assert.True(t, d.BlockStarted)
	assert.Equal(t, 10*time.Minute, d.RetryAfter)

	// Two windows later the counts have gone; the block has not.
	later := t0 + int64(2*time.Minute)
	d, err := n.Decide(later, "login", "alice", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.True(t, d.Blocked)
	assert.False(t, d.BlockStarted, "a denial while blocked does not start or extend the block")
	assert.Equal(t, 8*time.Minute, d.RetryAfter)
	assert.Equal(t, t0+int64(10*time.Minute), n.BlockedUntil(later, "login", "alice"))
	v, err := n.View(later, "login", "alice")
	require.NoError(t, err)
	assert.Equal(t, t0+int64(10*time.Minute), v.BlockedUntil)
	assert.Empty(t, v.Windows, "nothing counted while blocked")

	p, err := n.Peek(later, "login", "alice", 1)
	require.NoError(t, err)
	assert.True(t, p.Blocked)
	other, err := n.Decide(later, "login", "bob", 1)
	require.NoError(t, err)
	assert.True(t, other.Allowed, "the block is per key")

	end := t0 + int64(10*time.Minute)
	d, err = n.Decide(end, "login", "alice", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the block ends at until")
	assert.False(t, d.Blocked)
	assert.Equal(t, 1, n.Stats().Blocks)
	n.Tick(end)
	assert.Zero(t, n.Stats().Blocks, "Tick drops ended blocks")
	assert.Zero(t, n.BlockedUntil(end, "login", "alice"))
}

func TestPenaltyBoxShadowAndPeek(t *testing.T) {
	n := boxNode(t, replica("a", 1))
	d := exhaust(t, n, t0, "watch", "k")
	assert.True(t, d.Allowed, "shadow mode never denies")
	assert.True(t, d.ShadowDenied)
	assert.True(t, d.Blocked, "it would block")
	d, err := n.Decide(t0+int64(5*time.Minute), "watch", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.True(t, d.ShadowDenied && d.Blocked, "reported while the block lasts")

	for i := 0; i < 3; i++ {
		_, _ = n.Decide(t0, "login", "p", 1)
	}
	p, err := n.Peek(t0, "login", "p", 1)
	require.NoError(t, err)
	assert.False(t, p.Allowed)
	assert.False(t, p.Blocked, "Peek starts no block")
	assert.Zero(t, n.BlockedUntil(t0, "login", "p"))

	d = exhaust(t, n, t0, "plain", "k")
	assert.False(t, d.Allowed)
	assert.False(t, d.Blocked, "no block_for: no penalty box")
	assert.Zero(t, n.Stats().Blocks-1, "only the shadow rule's block is held")
}

func TestPenaltyBoxReplicatesByScope(t *testing.T) {
	a, b := boxNode(t, replica("a", 1)), boxNode(t, replica("b", 1))
	iad := boxNode(t, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "i1", Incarnation: 1})
	for _, rule := range []string{"login", "otp", "local"} {
		require.True(t, exhaust(t, a, t0, rule, "k").Blocked, rule)
	}
	out := a.Link().Flush(t0, nil)
	assert.ElementsMatch(t, []blocks.Block{
		{Rule: "login", Key: "k", Until: t0 + int64(10*time.Minute)},
		{Rule: "otp", Key: "k", Until: t0 + int64(10*time.Minute)},
	}, blocks.Section.Items(&out.Local), "pop and global blocks go to the members; node scope stays here")
	assert.Equal(t, []blocks.Block{{Rule: "login", Key: "k", Until: t0 + int64(10*time.Minute)}}, blocks.Section.Items(&out.PoP),
		"only global blocks go to other PoPs")
	flushed := a.Link().Flush(t0, nil)
	assert.Empty(t, blocks.Section.Items(&flushed.Local), "a block is flushed once")

	now := t0 + int64(2*time.Minute)
	st := b.Link().Apply(now, &out.Local, ScopePoP)
	assert.Equal(t, 2, st.Blocks.Merged)
	st = iad.Link().Apply(now, &out.PoP, ScopeGlobal)
	assert.Equal(t, 1, st.Blocks.Merged)
	for _, c := range []struct {
		n       *Node
		rule    string
		blocked bool
	}{{b, "login", true}, {b, "otp", true}, {b, "local", false}, {iad, "login", true}, {iad, "otp", false}} {
		d, err := c.n.Decide(now, c.rule, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, c.blocked, d.Blocked, "%s %s", c.n.Link().Self(), c.rule)
		assert.Equal(t, !c.blocked, d.Allowed, "%s %s", c.n.Link().Self(), c.rule)
		if c.blocked {
			assert.Equal(t, 8*time.Minute, d.RetryAfter)
		}
	}

	// A pop-scope block may not come from another PoP.
	forged := *blocks.Section.With(&wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1)}, []blocks.Block{{Rule: "otp", Key: "x", Until: now + 1}}...)
	st = b.Link().Apply(now, &forged, ScopeGlobal)
	assert.Equal(t, 1, st.WrongScope)
	assert.Zero(t, b.BlockedUntil(now, "otp", "x"))

	// Duplicates change nothing: merging is idempotent.
	st = b.Link().Apply(now, &out.Local, ScopePoP)
	assert.Equal(t, 2, st.Blocks.Unchanged)
}

func TestApplyBoundsRemoteBlocks(t *testing.T) {
	n := boxNode(t, replica("a", 1))
	from := replica("b", 1)
	far := t0 + int64(time.Hour)
	d := *blocks.Section.With(&wire.Delta{Sender: from}, []blocks.Block{
		{Rule: "login", Key: "far", Until: far},
		{Rule: "login", Key: "past", Until: t0},
		{Rule: "plain", Key: "k", Until: t0 + 1},
		{Rule: "nope", Key: "k", Until: t0 + 1},
		{Rule: "login", Key: "", Until: t0 + 1},
	}...)
	st := n.Link().Apply(t0, &d, ScopePoP)
	assert.Equal(t, BlockApplyStats{Merged: 1, Expired: 1, Ignored: 1, Clamped: 1}, st.Blocks)
	assert.Equal(t, 1, st.UnknownRule)
	assert.Equal(t, 1, st.BadEntry)
	assert.Equal(t, t0+int64(10*time.Minute+DefaultMaxSkew), n.BlockedUntil(t0, "login", "far"),
		"no longer than block_for plus the max skew from now")
	assert.Equal(t, 1, n.Stats().Applied.Blocks.Clamped)
}

func TestBlocksAreBoundedByMaxKeys(t *testing.T) {
	n, err := New(Config{Self: replica("a", 1), Rules: boxRules(), MaxKeys: 16, Shards: 1})
	require.NoError(t, err)
	d := wire.Delta{Sender: replica("b", 1)}
	for i := 0; i < 100; i++ {
		blocks.Section.Append(&d, blocks.Block{Rule: "login", Key: strconv.Itoa(i), Until: t0 + int64(time.Minute)})
	}
	st := n.Link().Apply(t0, &d, ScopePoP)
	assert.Equal(t, 16, st.Blocks.Merged)
	assert.Equal(t, 84, st.Blocks.Full)
	assert.Equal(t, 16, n.Stats().Blocks)
	assert.Equal(t, uint64(84), n.Stats().BlocksFull)
	n.Tick(t0 + int64(time.Minute))
	assert.Zero(t, n.Stats().Blocks)
}

func TestAntiEntropyAndStateCarryBlocks(t *testing.T) {
	a := boxNode(t, replica("a", 1))
	exhaust(t, a, t0, "login", "k")
	exhaust(t, a, t0, "otp", "k")
	a.Link().Flush(t0, nil)
	ae := a.Link().AntiEntropy(t0+1, nil)
	assert.Len(t, blocks.Section.Items(&ae.Local), 2)
	assert.Equal(t, []blocks.Block{{Rule: "login", Key: "k", Until: t0 + int64(10*time.Minute)}}, blocks.Section.Items(&ae.PoP))
	ae = a.Link().AntiEntropy(t0+1, func(string) bool { return false })
	assert.Empty(t, blocks.Section.Items(&ae.PoP), "a PoP's blocks go out through the key's owner")

	joiner := boxNode(t, replica("c", 1))
	for _, d := range a.Link().State(t0 + 1) {
		via := ScopePoP
		if d.Sender.IsPoP() {
			via = ScopeGlobal
		}
		joiner.Link().Apply(t0+1, &d, via)
	}
	assert.NotZero(t, joiner.BlockedUntil(t0+1, "login", "k"))
	assert.NotZero(t, joiner.BlockedUntil(t0+1, "otp", "k"))

	require.NoError(t, a.SetRules(boxRules()[1:]))
	assert.Zero(t, a.BlockedUntil(t0+1, "login", "k"), "a removed rule's blocks are dropped")
}

func TestRuleValidationOfGuards(t *testing.T) {
	base := Rule{Name: "r", Limit: 1, Window: time.Second, Cost: 1}
	for _, tt := range []struct {
		name string
		edit func(*Rule)
		want string
	}{
		{"negative block_for", func(r *Rule) { r.BlockFor = -time.Second }, "block_for: must be 0 or a whole number of milliseconds"},
		{"sub-millisecond block_for", func(r *Rule) { r.BlockFor = time.Microsecond }, "block_for: must be 0 or a whole number of milliseconds"},
		{"block_for too long", func(r *Rule) { r.BlockFor = MaxBlockFor + time.Millisecond }, "block_for: must be at most"},
		{"unknown on_unsure", func(r *Rule) { r.OnUnsure = 7 }, "on_unsure: unknown policy 7"},
		{"share_rise past 1", func(r *Rule) { r.OnPartition, r.ShareRise = Share, 1.01 }, "share_rise: must be at most 1"},
		{"share_rise under keep", func(r *Rule) { r.ShareRise = 0.1 }, "share_rise: only for on_partition: share"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.edit(&r)
			assert.ErrorContains(t, r.Validate(), tt.want)
		})
	}
}

func TestPenalizeAPeekedDenial(t *testing.T) {
	n := boxNode(t, replica("a", 1))
	for i := 0; i < 3; i++ {
		_, _ = n.Decide(t0, "login", "k", 1)
		_, _ = n.Decide(t0, "plain", "k", 1)
	}
	d, err := n.Peek(t0, "login", "k", 1)
	require.NoError(t, err)
	require.False(t, d.Blocked)
	n.Penalize(t0, "login", "k", &d)
	assert.True(t, d.Blocked && d.BlockStarted)
	assert.Equal(t, 10*time.Minute, d.RetryAfter)
	assert.Equal(t, t0+int64(10*time.Minute), n.BlockedUntil(t0, "login", "k"))

	ok, err := n.Peek(t0, "login", "other", 1)
	require.NoError(t, err)
	n.Penalize(t0, "login", "other", &ok)
	assert.False(t, ok.Blocked, "an admission is not penalized")
	p, err := n.Peek(t0, "plain", "k", 1)
	require.NoError(t, err)
	n.Penalize(t0, "plain", "k", &p)
	assert.False(t, p.Blocked, "no block_for, no block")
	assert.Equal(t, 1, n.Stats().Blocks)
}

// A rule of several windows, overrides or tiers has the penalty box and the
// unsure guards of a rule of one.
func TestGuardsOnRulesOfSeveralWindows(t *testing.T) {
	rules := []Rule{{Name: "login", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeGlobal,
		More: []Limit{{Limit: 100, Window: time.Hour}}, BlockFor: 10 * time.Minute, OnUnsure: DenyUnsure}}
	n, err := New(Config{Self: replica("a", 1), Rules: rules})
	require.NoError(t, err)
	n.Link().SetEpoch(1)
	d := exhaust(t, n, t0, "login", "alice")
	assert.False(t, d.Allowed)
	assert.True(t, d.Blocked, "the denial starts a block")
	later := t0 + int64(2*time.Minute) // the minute window is free again
	d, err = n.Decide(later, "login", "alice", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "still in the penalty box")
	assert.True(t, d.Blocked)
	assert.Equal(t, 8*time.Minute, d.RetryAfter)
	d, err = n.Decide(t0+int64(11*time.Minute), "login", "alice", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the block ended")

	n.Link().SetSynced(false)
	d, err = n.Decide(later, "login", "bob", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, UnsureNotSynced, d.Unsure)
}
