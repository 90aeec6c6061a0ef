package pop

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/inflight"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

func concRules() []Rule {
	return []Rule{
		{Name: "uploads", Kind: Concurrency, Limit: 3, Cost: 1, Scope: ScopePoP, LeaseTTL: 30 * time.Second},
		{Name: "local", Kind: Concurrency, Limit: 2, Cost: 1, Scope: ScopeNode},
		{Name: "watch", Kind: Concurrency, Limit: 1, Cost: 1, Scope: ScopeNode, Mode: Shadow},
		{Name: "api", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeNode},
	}
}

func concNode(t *testing.T, node string, cfg Config) *Node {
	t.Helper()
	cfg.Self, cfg.Rules = replica(node, 1), concRules()
	n, err := New(cfg)
	require.NoError(t, err)
	return n
}

func TestConcurrencyRuleValidate(t *testing.T) {
	ok := Rule{Name: "c", Kind: Concurrency, Limit: 10, Cost: 1, Scope: ScopePoP}
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name  string
		edit  func(r *Rule)
		field string
	}{
		{"window", func(r *Rule) { r.Window = time.Second }, "window:"},
		{"more windows", func(r *Rule) { r.More = []Limit{{Limit: 1, Window: time.Hour}} }, "limits:"},
		{"overrides", func(r *Rule) { r.Overrides = []Override{{Key: "k"}} }, "overrides:"},
		{"tiers", func(r *Rule) { r.Tiers = map[string][]Limit{"pro": nil} }, "tiers:"},
		{"share", func(r *Rule) { r.OnPartition = Share }, "on_partition:"},
		{"block", func(r *Rule) { r.BlockFor = time.Minute }, "block_for:"},
		{"unsure deny", func(r *Rule) { r.OnUnsure = DenyUnsure }, "on_unsure:"},
		{"global", func(r *Rule) { r.Scope = ScopeGlobal }, "scope: global"},
		{"limit 0", func(r *Rule) { r.Limit = 0 }, "limit:"},
		{"huge limit", func(r *Rule) { r.Limit = MaxConcurrency + 1 }, "limit:"},
		{"short ttl", func(r *Rule) { r.LeaseTTL = time.Millisecond }, "lease_ttl:"},
		{"long ttl", func(r *Rule) { r.LeaseTTL = 48 * time.Hour }, "lease_ttl:"},
		{"cost", func(r *Rule) { r.Cost = 11 }, "cost:"},
		{"kind", func(r *Rule) { r.Kind = 7 }, "kind:"},
		{"gcra", func(r *Rule) { r.Algorithm = GCRA }, "algorithm:"},
		{"burst", func(r *Rule) { r.Burst = 2 }, "algorithm:"},
		{"name", func(r *Rule) { r.Name = "a b" }, "name:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Validate()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.field), "%v", err)
		})
	}
	rate := Rule{Name: "r", Limit: 1, Window: time.Second, Cost: 1, LeaseTTL: time.Minute}
	err := rate.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lease_ttl:")
}

func TestConcurrencyAcquireRelease(t *testing.T) {
	n := concNode(t, "a", Config{})
	var held []Lease
	for i := range 3 {
		res := decideOne(t, n, t0, chk(t, n, "uploads", "k", 0))
		require.True(t, res.Allowed, "slot %d", i)
		require.True(t, res.Counted)
		require.True(t, res.Lease.Held())
		assert.Equal(t, uint64(2-i), res.Remaining)
		assert.Equal(t, t0+int64(30*time.Second), res.Lease.Until())
		held = append(held, res.Lease)
	}
	denied := decideOne(t, n, t0, chk(t, n, "uploads", "k", 0))
	assert.False(t, denied.Allowed)
	assert.False(t, denied.Counted)
	assert.False(t, denied.Lease.Held())
	assert.Equal(t, ConcurrencyRetry, denied.RetryAfter)
	assert.Zero(t, denied.Remaining)
	other := decideOne(t, n, t0, chk(t, n, "uploads", "other-key", 0))
	assert.True(t, other.Allowed, "keys are counted apart")

	assert.True(t, n.Release(t0, held[1].ID()))
	assert.False(t, n.Release(t0, held[1].ID()), "a lease is given back once")
	again := decideOne(t, n, t0, chk(t, n, "uploads", "k", 0))
	require.True(t, again.Allowed, "a released slot is free again")

	assert.True(t, n.Release(t0, held[0].ID()))
	assert.False(t, n.Release(t0, held[0].ID()))
	assert.False(t, n.Release(t0, LeaseID{}), "an unknown lease")
	own, members, ok := n.InFlight(t0, "uploads", "k")
	require.True(t, ok)
	assert.Equal(t, uint64(2), own)
	assert.Zero(t, members)

	st := n.SlotStats()
	assert.Equal(t, uint64(5), st.Acquired)
	assert.Equal(t, uint64(1), st.Denied)
	assert.Equal(t, uint64(2), st.Released)
	assert.Equal(t, 3, st.Leases)

	_, err := n.Decide(t0, "uploads", "k", 1)
	assert.ErrorIs(t, err, ErrConcurrencyRule, "a rate decision of a concurrency rule")
	_, err = n.Peek(t0, "uploads", "k", 1)
	assert.ErrorIs(t, err, ErrConcurrencyRule)
}

func TestConcurrencyLeaseIDs(t *testing.T) {
	n := concNode(t, "a", Config{})
	seen := map[LeaseID]bool{}
	for range 100 {
		res := decideOne(t, n, t0, chk(t, n, "local", "k", 0))
		require.True(t, res.Allowed)
		id := res.Lease.ID()
		assert.False(t, seen[id], "ids are unique")
		seen[id] = true
		back, err := ParseLeaseID(id.String())
		require.NoError(t, err)
		assert.Equal(t, id, back)
		require.True(t, n.Release(t0, res.Lease.ID()))
	}
	for _, bad := range []string{"", "zz", strings.Repeat("g", LeaseIDLen), strings.Repeat("a", LeaseIDLen+2)} {
		_, err := ParseLeaseID(bad)
		assert.ErrorIs(t, err, ErrBadLeaseID, "%q", bad)
	}
	a := concNode(t, "a", Config{})
	b := concNode(t, "a", Config{})
	ra := decideOne(t, a, t0, chk(t, a, "local", "k", 0))
	rb := decideOne(t, b, t0, chk(t, b, "local", "k", 0))
	assert.NotEqual(t, ra.Lease.ID(), rb.Lease.ID(), "without a seed every node draws its own ids")
}

func TestConcurrencyLeaseExpires(t *testing.T) {
	n := concNode(t, "a", Config{})
	ttl := int64(30 * time.Second)
	for range 3 {
		require.True(t, decideOne(t, n, t0, chk(t, n, "uploads", "k", 0)).Allowed)
	}
	pin := chk(t, n, "local", "k", 0)
	pin.Pin = true
	pinned := decideOne(t, n, t0, pin)
	require.True(t, pinned.Allowed)
	assert.Zero(t, pinned.Lease.Until(), "a pinned lease never ends")

	require.False(t, decideOne(t, n, t0+ttl-1, chk(t, n, "uploads", "k", 0)).Allowed, "held until the TTL")
	late := decideOne(t, n, t0+ttl, chk(t, n, "uploads", "k", 0))
	require.True(t, late.Allowed, "a crashed holder's slots come back at the TTL")
	assert.Equal(t, uint64(3), n.SlotStats().Expired)

	// Tick expires what nothing looks at, and forgets empty keys.
	n.Tick(t0 + 10*ttl)
	st := n.SlotStats()
	assert.Equal(t, uint64(4), st.Expired)
	assert.Equal(t, 1, st.Leases, "only the pinned lease is left")
	assert.Equal(t, 1, st.Keys)
	assert.False(t, n.Release(t0+10*ttl, late.Lease.ID()), "an expired lease is not given back")
	assert.True(t, n.Release(t0+10*ttl, pinned.Lease.ID()))
	assert.Zero(t, n.SlotStats().Keys)
}

func TestConcurrencyShadow(t *testing.T) {
	n := concNode(t, "a", Config{})
	first := decideOne(t, n, t0, chk(t, n, "watch", "k", 0))
	require.True(t, first.Allowed)
	assert.True(t, first.Lease.Held())
	second := decideOne(t, n, t0, chk(t, n, "watch", "k", 0))
	assert.True(t, second.Allowed, "shadow rules never deny")
	assert.True(t, second.ShadowDenied)
	assert.False(t, second.Lease.Held(), "nothing held when no slot was free")
}

func TestConcurrencyAllOrNothing(t *testing.T) {
	n := concNode(t, "a", Config{})
	req := func() (*Request, []Result) {
		return &Request{Combine: All, Checks: []Check{chk(t, n, "local", "k", 0), chk(t, n, "api", "k", 0)}}, make([]Result, 2)
	}
	for range 2 {
		r, res := req()
		out, err := n.DecideChecks(t0, r, res)
		require.NoError(t, err)
		require.True(t, out.Allowed)
		require.True(t, res[0].Lease.Held())
		require.True(t, n.Release(t0, res[0].Lease.ID()))
	}
	r, res := req()
	out, err := n.DecideChecks(t0, r, res)
	require.NoError(t, err)
	assert.False(t, out.Allowed, "the rate rule denies")
	assert.Equal(t, 1, out.Binding)
	assert.False(t, res[0].Lease.Held(), "no slot is held for a denied request")
	own, _, _ := n.InFlight(t0, "local", "k")
	assert.Zero(t, own)

	// A race lost after the judging: the slot acquired first is given back.
	m := concNode(t, "b", Config{})
	r = &Request{Combine: All, Checks: []Check{chk(t, m, "local", "k", 0), chk(t, m, "api", "k", 2)}}
	setBeforeCount(t, func() { _, _ = m.Decide(t0, "api", "k", 1) })
	res = make([]Result, 2)
	out, err = m.DecideChecks(t0, r, res)
	setBeforeCount(t, nil)
	require.NoError(t, err)
	assert.False(t, out.Allowed)
	assert.Zero(t, out.Counted)
	assert.False(t, res[0].Counted)
	own, _, _ = m.InFlight(t0, "local", "k")
	assert.Zero(t, own, "the slot went back")

	// Each: a concurrency check on its own, beside a rate check.
	e := &Request{Combine: Each, Checks: []Check{chk(t, m, "local", "k", 0), chk(t, m, "local", "k", 0), chk(t, m, "local", "k", 0)}}
	res = make([]Result, 3)
	out, err = m.DecideChecks(t0, e, res)
	require.NoError(t, err)
	assert.True(t, res[0].Allowed && res[1].Allowed)
	assert.False(t, res[2].Allowed)
	assert.Equal(t, 2, out.Counted)

	// A probe judges without holding.
	p := chk(t, m, "uploads", "p", 0)
	p.Probe = true
	pr := decideOne(t, m, t0, p)
	assert.True(t, pr.Allowed)
	assert.False(t, pr.Lease.Held())
	own, _, _ = m.InFlight(t0, "uploads", "p")
	assert.Zero(t, own)

	// An idempotency key does not apply: a retry is another request.
	c := chk(t, m, "uploads", "i", 0)
	c.IdempotencyKey = "req-1"
	for range 2 {
		res := decideOne(t, m, t0, c)
		assert.True(t, res.Lease.Held())
		assert.False(t, res.Repeat)
	}
}

func TestConcurrencyLeaseTableFull(t *testing.T) {
	n := concNode(t, "a", Config{MaxLeases: 2})
	require.True(t, decideOne(t, n, t0, chk(t, n, "uploads", "a", 0)).Allowed)
	require.True(t, decideOne(t, n, t0, chk(t, n, "uploads", "b", 0)).Allowed)
	full := decideOne(t, n, t0, chk(t, n, "uploads", "c", 0))
	assert.False(t, full.Allowed, "no room for a lease: denied, never admitted untracked")
	assert.True(t, full.Untracked)
	assert.Equal(t, uint64(1), n.SlotStats().Full)
}

// flushTo sends a's in-flight counts to b, as the PoP's members do.
func flushTo(t *testing.T, now int64, a, b *Node) ApplyStats {
	t.Helper()
	batch := a.Link().Flush(now, nil)
	return b.Link().Apply(now, &batch.Local, ScopePoP)
}

func TestConcurrencyPoPScope(t *testing.T) {
	a, b := concNode(t, "a", Config{}), concNode(t, "b", Config{})
	ra := decideOne(t, a, t0, chk(t, a, "uploads", "k", 0))
	rb := decideOne(t, a, t0, chk(t, a, "uploads", "k", 0))
	require.True(t, ra.Allowed && rb.Allowed)
	st := flushTo(t, t0, a, b)
	assert.Equal(t, 1, st.Inflight.Merged)
	own, members, _ := b.InFlight(t0, "uploads", "k")
	assert.Zero(t, own)
	assert.Equal(t, uint64(2), members)

	got := decideOne(t, b, t0, chk(t, b, "uploads", "k", 0))
	require.True(t, got.Allowed)
	assert.Zero(t, got.Remaining)
	assert.False(t, decideOne(t, b, t0, chk(t, b, "uploads", "k", 0)).Allowed, "the PoP's three slots are taken")

	// The node-scope rule never travels.
	require.True(t, decideOne(t, a, t0, chk(t, a, "local", "k", 0)).Allowed)
	batch := a.Link().Flush(t0, nil)
	assert.Empty(t, inflight.Section.Items(&batch.Local), "nothing changed but a node-scope key")

	// A release travels as a lower count with a newer version.
	require.True(t, a.Release(t0, ra.Lease.ID()))
	old := a.Link().Flush(t0, nil)
	require.Len(t, inflight.Section.Items(&old.Local), 1)
	assert.Equal(t, uint64(1), inflight.Section.Items(&old.Local)[0].Count)
	require.True(t, a.Release(t0, rb.Lease.ID()))
	newer := a.Link().Flush(t0, nil)
	b.Link().Apply(t0, &newer.Local, ScopePoP)
	st = b.Link().Apply(t0, &old.Local, ScopePoP)
	assert.Equal(t, 1, st.Inflight.Unchanged, "an older value arriving late changes nothing")
	_, members, _ = b.InFlight(t0, "uploads", "k")
	assert.Zero(t, members)
	assert.True(t, decideOne(t, b, t0, chk(t, b, "uploads", "k", 0)).Allowed)
}

func TestConcurrencyMemberSlotsComeBack(t *testing.T) {
	ttl := int64(30 * time.Second)
	a, b := concNode(t, "a", Config{}), concNode(t, "b", Config{})
	for range 3 {
		require.True(t, decideOne(t, a, t0, chk(t, a, "uploads", "k", 0)).Allowed)
	}
	flushTo(t, t0, a, b)
	require.False(t, decideOne(t, b, t0, chk(t, b, "uploads", "k", 0)).Allowed)

	// a goes silent holding its slots (it crashed): they stop counting on
	// b the lease TTL after b last heard them.
	assert.False(t, decideOne(t, b, t0+ttl-1, chk(t, b, "uploads", "k", 0)).Allowed)
	assert.True(t, decideOne(t, b, t0+ttl, chk(t, b, "uploads", "k", 0)).Allowed)

	// A live holder re-sends its counts, so they never lapse.
	c, d := concNode(t, "c", Config{}), concNode(t, "d", Config{})
	for range 3 {
		pin := chk(t, c, "uploads", "k", 0)
		pin.Pin = true
		require.True(t, decideOne(t, c, t0, pin).Allowed)
	}
	for now := t0; now <= t0+3*ttl; now += int64(time.Second) {
		flushTo(t, now, c, d)
		require.False(t, decideOne(t, d, now, chk(t, d, "uploads", "k", 0)).Allowed, "at %v", time.Duration(now-t0))
	}
	// The membership sees c go: its counts stop counting at once.
	d.Link().KeepMembers(func(r identity.Replica) bool { return r.Node != "c" })
	assert.True(t, decideOne(t, d, t0+3*ttl, chk(t, d, "uploads", "k", 0)).Allowed)
	assert.Zero(t, d.SlotStats().PeerCounts)
}

func TestConcurrencyApplyDistrusts(t *testing.T) {
	b := concNode(t, "b", Config{MaxLeases: 2})
	from := replica("a", 1)
	d := *inflight.Section.With(&wire.Delta{Sender: from}, []inflight.Count{
		{Rule: "uploads", Key: "k", Count: 1 << 40, Version: 1},
		{Rule: "nope", Key: "k", Count: 1, Version: 1},
		{Rule: "local", Key: "k", Count: 1, Version: 1},
		{Rule: "api", Key: "k", Count: 1, Version: 1},
		{Rule: "uploads", Key: strings.Repeat("x", crdt.MaxKeyLen+1), Count: 1, Version: 1},
		{Rule: "uploads", Key: "k2", Count: 1, Version: 1},
		{Rule: "uploads", Key: "k3", Count: 1, Version: 1},
	}...)
	st := b.Link().Apply(t0, &d, ScopePoP)
	assert.Equal(t, 1, st.Inflight.Clamped, "no member holds more than the limit")
	assert.Equal(t, 1, st.UnknownRule)
	assert.Equal(t, 2, st.WrongScope, "a node-scope rule and a rate rule")
	assert.Equal(t, 1, st.BadEntry)
	assert.Equal(t, 1, st.Inflight.Refused, "the members' counts are capped")
	_, members, _ := b.InFlight(t0, "uploads", "k")
	assert.Equal(t, uint64(3), members)

	other := *inflight.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "fra"}, Node: "x", Incarnation: 1}}, []inflight.Count{{Rule: "uploads", Key: "z", Count: 1, Version: 1}}...)
	st = b.Link().Apply(t0, &other, ScopeGlobal)
	assert.Equal(t, 1, st.WrongScope, "another PoP's node may not send them")
	_, members, _ = b.InFlight(t0, "uploads", "z")
	assert.Zero(t, members)
}

func TestConcurrencyRefreshAndAntiEntropy(t *testing.T) {
	n := concNode(t, "a", Config{})
	for _, k := range []string{"b", "a"} {
		pin := chk(t, n, "uploads", k, 0)
		pin.Pin = true
		require.True(t, decideOne(t, n, t0, pin).Allowed)
	}
	first := n.Link().Flush(t0, nil)
	require.Len(t, inflight.Section.Items(&first.Local), 2)
	flushed := n.Link().Flush(t0+1, nil)
	assert.Empty(t, inflight.Section.Items(&flushed.Local), "nothing changed, no refresh due")
	quarter := int64(30*time.Second) / 4
	again := n.Link().Flush(t0+quarter, nil)
	require.Len(t, inflight.Section.Items(&again.Local), 2, "every own count again each quarter of the lease TTL")
	assert.Equal(t, "a", inflight.Section.Items(&again.Local)[0].Key, "sorted")
	assert.Greater(t, inflight.Section.Items(&again.Local)[0].Version, inflight.Section.Items(&first.Local)[1].Version, "newer versions")
	assert.Greater(t, inflight.Section.Items(&again.Local)[1].Version, inflight.Section.Items(&again.Local)[0].Version)

	ae := n.Link().AntiEntropy(t0+quarter+1, nil)
	require.Len(t, inflight.Section.Items(&ae.Local), 2, "anti-entropy sends every own count that is not zero")
	assert.Greater(t, inflight.Section.Items(&ae.Local)[0].Version, inflight.Section.Items(&again.Local)[1].Version)

	// Alone in its PoP (local false): the change marks are cleared all the
	// same, and nothing is built.
	res := decideOne(t, n, t0, chk(t, n, "uploads", "c", 0))
	require.True(t, res.Allowed)
	b := n.Link().FlushTo(t0+quarter+2, nil, false)
	assert.Empty(t, inflight.Section.Items(&b.Local))
	flushed = n.Link().Flush(t0+quarter+3, nil)
	assert.Empty(t, inflight.Section.Items(&flushed.Local))
}

func TestConcurrencyReload(t *testing.T) {
	n := concNode(t, "a", Config{})
	res := decideOne(t, n, t0, chk(t, n, "uploads", "k", 0))
	require.True(t, res.Allowed)

	// A new limit keeps the leases held.
	rules := concRules()
	rules[0].Limit = 1
	require.NoError(t, n.SetRules(rules))
	assert.False(t, decideOne(t, n, t0, chk(t, n, "uploads", "k", 0)).Allowed, "the lease still holds the one slot")
	require.True(t, n.Release(t0, res.Lease.ID()))
	res = decideOne(t, n, t0, chk(t, n, "uploads", "k", 0))
	require.True(t, res.Allowed)

	// A removed rule's leases go once its retired state is dropped; a
	// release of one then gives back nothing.
	require.NoError(t, n.SetRules(rules[1:]))
	n.Tick(t0 + 1)
	n.Tick(t0 + 2)
	assert.Zero(t, n.SlotStats().Leases)
	assert.False(t, n.Release(t0+2, res.Lease.ID()))
	_, _, ok := n.InFlight(t0+2, "uploads", "k")
	assert.False(t, ok)

	// A rate rule cannot become a concurrency rule's counts or leases: a
	// changed kind is another rule.
	rules[0].Kind, rules[0].Window, rules[0].LeaseTTL = Rate, time.Minute, 0
	require.NoError(t, n.SetRules(rules))
	d, err := n.Decide(t0+3, "uploads", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// The kill switch: a concurrency rule switched off admits holding nothing,
// in shadow it admits beyond the limit holding nothing, and back to its
// own mode it limits again.
func TestConcurrencyRuleModes(t *testing.T) {
	n := concNode(t, "a", Config{})
	for range 2 {
		require.True(t, decideOne(t, n, t0, chk(t, n, "local", "k", 0)).Allowed)
	}
	_, err := n.SetRuleMode(t0, "local", modes.Off)
	require.NoError(t, err)
	off := decideOne(t, n, t0, chk(t, n, "local", "k", 0))
	assert.True(t, off.Allowed)
	assert.True(t, off.Off)
	assert.False(t, off.Lease.Held())
	assert.False(t, off.Counted)

	_, err = n.SetRuleMode(t0+1, "local", modes.Shadow)
	require.NoError(t, err)
	sh := decideOne(t, n, t0+1, chk(t, n, "local", "k", 0))
	assert.True(t, sh.Allowed)
	assert.True(t, sh.ShadowDenied)
	assert.False(t, sh.Lease.Held())

	_, err = n.SetRuleMode(t0+2, "local", modes.Config)
	require.NoError(t, err)
	assert.False(t, decideOne(t, n, t0+2, chk(t, n, "local", "k", 0)).Allowed, "enforced again: the two slots are held")
	own, _, _ := n.InFlight(t0+2, "local", "k")
	assert.EqualValues(t, 2, own)
}
