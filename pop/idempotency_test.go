package pop

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/wire"
)

func idemRules() []Rule {
	return []Rule{
		{Name: "pay", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopePoP},
		{Name: "glob", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
		{Name: "local", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeNode},
		{Name: "watch", Limit: 1, Window: time.Minute, Cost: 1, Scope: ScopePoP, Mode: Shadow},
		{Name: "box", Limit: 1, Window: time.Minute, Cost: 1, Scope: ScopePoP, BlockFor: time.Hour},
	}
}

func idemNode(t *testing.T, node string, cfg Config) *Node {
	t.Helper()
	cfg.Self, cfg.Rules = replica(node, 1), idemRules()
	n, err := New(cfg)
	require.NoError(t, err)
	return n
}

func idemChk(t *testing.T, n *Node, rule, key, idem string) Check {
	c := chk(t, n, rule, key, 0)
	c.IdempotencyKey = idem
	return c
}

func decideOne(t *testing.T, n *Node, now int64, c Check) Result {
	t.Helper()
	var res Result
	require.NoError(t, n.DecideCheck(now, c, &res))
	return res
}

func TestIdempotentRepeatSpendsNothing(t *testing.T) {
	n := idemNode(t, "a", Config{})
	first := decideOne(t, n, t0, idemChk(t, n, "pay", "k", "req-1"))
	require.True(t, first.Allowed)
	assert.False(t, first.Repeat)
	assert.True(t, first.Counted)
	assert.Equal(t, uint64(2), first.Remaining)

	for i := range 5 {
		again := decideOne(t, n, t0+int64(i)*int64(time.Second), idemChk(t, n, "pay", "k", "req-1"))
		assert.True(t, again.Allowed, "the same decision")
		assert.True(t, again.Repeat)
		assert.False(t, again.Counted)
		assert.Equal(t, uint64(2), again.Remaining, "the key as it stands")
	}
	assert.Equal(t, uint64(1), spent(t, n, "pay", "k"), "counted once")

	other := decideOne(t, n, t0, idemChk(t, n, "pay", "k", "req-2"))
	assert.False(t, other.Repeat, "another idempotency key is another request")
	assert.Equal(t, uint64(1), other.Remaining)
	assert.False(t, decideOne(t, n, t0, idemChk(t, n, "pay", "j", "req-1")).Repeat, "so is another key")
	assert.False(t, decideOne(t, n, t0, idemChk(t, n, "glob", "k", "req-1")).Repeat, "and another rule")
	assert.Equal(t, uint64(2), spent(t, n, "pay", "k"))
}

func TestIdempotentDenialIsDecidedAgain(t *testing.T) {
	n := idemNode(t, "a", Config{})
	for range 3 {
		decideOne(t, n, t0, chk(t, n, "pay", "k", 0))
	}
	denied := decideOne(t, n, t0, idemChk(t, n, "pay", "k", "late"))
	require.False(t, denied.Allowed)
	assert.False(t, denied.Repeat)
	again := decideOne(t, n, t0, idemChk(t, n, "pay", "k", "late"))
	assert.False(t, again.Allowed)
	assert.False(t, again.Repeat, "a denial spent nothing and is not remembered")

	// Two windows later the key has room again: the retry with the same key
	// is decided afresh and admitted, and then remembered.
	later := t0 + int64(2*time.Minute)
	ok := decideOne(t, n, later, idemChk(t, n, "pay", "k", "late"))
	assert.True(t, ok.Allowed)
	assert.False(t, ok.Repeat)
	rep := decideOne(t, n, later, idemChk(t, n, "pay", "k", "late"))
	assert.True(t, rep.Repeat)
	assert.True(t, rep.Allowed)
}

func TestIdempotentShadowAndBlock(t *testing.T) {
	n := idemNode(t, "a", Config{})
	decideOne(t, n, t0, chk(t, n, "watch", "k", 0))
	sd := decideOne(t, n, t0, idemChk(t, n, "watch", "k", "i"))
	require.True(t, sd.Allowed)
	require.True(t, sd.ShadowDenied)
	rep := decideOne(t, n, t0, idemChk(t, n, "watch", "k", "i"))
	assert.True(t, rep.Repeat)
	assert.True(t, rep.Allowed)
	assert.True(t, rep.ShadowDenied, "a shadow rule's would-be denial is remembered too")

	ok := decideOne(t, n, t0, idemChk(t, n, "box", "k", "first"))
	require.True(t, ok.Allowed)
	blocked := decideOne(t, n, t0, chk(t, n, "box", "k", 0))
	require.True(t, blocked.BlockStarted)
	rep = decideOne(t, n, t0, idemChk(t, n, "box", "k", "first"))
	assert.True(t, rep.Repeat)
	assert.True(t, rep.Allowed, "admitted before the block: the same answer")
	assert.False(t, rep.Blocked)
	assert.Zero(t, rep.RetryAfter)
}

func TestIdempotencyTTL(t *testing.T) {
	n := idemNode(t, "a", Config{IdempotencyTTL: time.Minute})
	decideOne(t, n, t0, idemChk(t, n, "pay", "k", "i"))
	assert.True(t, decideOne(t, n, t0+int64(59*time.Second), idemChk(t, n, "pay", "k", "i")).Repeat)
	after := decideOne(t, n, t0+int64(time.Minute), idemChk(t, n, "pay", "k", "i"))
	assert.False(t, after.Repeat, "forgotten at the TTL")
	assert.True(t, after.Counted)
	n.Tick(t0 + int64(3*time.Minute))
	assert.Zero(t, n.Stats().Memos.Len, "Tick drops what is over")

	for _, ttl := range []time.Duration{-time.Second, MaxIdempotencyTTL + 1} {
		_, err := New(Config{Self: replica("a", 1), IdempotencyTTL: ttl})
		assert.ErrorContains(t, err, "idempotency ttl", "%v", ttl)
	}
	_, err := New(Config{Self: replica("a", 1), MaxIdempotencyKeys: -1})
	assert.ErrorContains(t, err, "max idempotency keys")
}

func TestIdempotencyBound(t *testing.T) {
	n := idemNode(t, "a", Config{MaxIdempotencyKeys: 64})
	for i := range 1000 {
		now := t0 + int64(i)*int64(time.Millisecond)
		decideOne(t, n, now, idemChk(t, n, "pay", "k"+strconv.Itoa(i), "i"))
		require.LessOrEqual(t, n.Stats().Memos.Len, 64)
	}
	st := n.Stats().Memos
	assert.Equal(t, 64, st.Max)
	assert.Equal(t, 1000-64, int(st.Evicted))
	// The latest decisions are the ones remembered.
	assert.True(t, decideOne(t, n, t0+int64(time.Second), idemChk(t, n, "pay", "k999", "i")).Repeat)
	assert.False(t, decideOne(t, n, t0+int64(time.Second), idemChk(t, n, "pay", "k0", "i")).Repeat, "the first to expire was forgotten first")

	d, err := New(Config{Self: replica("a", 1), MaxKeys: 4000})
	require.NoError(t, err)
	assert.Equal(t, 1000, d.Stats().Memos.Max, "a quarter of max keys by default")
}

func TestIdempotencyKeyTooLong(t *testing.T) {
	n := idemNode(t, "a", Config{})
	var res Result
	err := n.DecideCheck(t0, idemChk(t, n, "pay", "k", strings.Repeat("i", MaxIdempotencyKeyLen+1)), &res)
	assert.ErrorIs(t, err, ErrIdempotencyKeyTooLong)
	assert.Zero(t, spent(t, n, "pay", "k"))
	o, rs := decideChecks(t, n, Request{Checks: []Check{idemChk(t, n, "pay", "k", strings.Repeat("i", MaxIdempotencyKeyLen+1)), chk(t, n, "pay", "k", 0)}})
	assert.ErrorIs(t, rs[0].Err, ErrIdempotencyKeyTooLong, "skipped when not strict")
	assert.Equal(t, 1, o.Counted)
}

func TestIdempotentEachBatch(t *testing.T) {
	n := idemNode(t, "a", Config{})
	req := Request{Checks: []Check{idemChk(t, n, "pay", "k", "i"), idemChk(t, n, "pay", "j", "i"), chk(t, n, "pay", "k", 0)}}
	o, res := decideChecks(t, n, req)
	assert.Equal(t, 3, o.Counted)
	o, res = decideChecks(t, n, req)
	assert.Equal(t, 1, o.Counted, "only the check without an idempotency key counts again")
	assert.True(t, res[0].Repeat)
	assert.True(t, res[1].Repeat)
	assert.False(t, res[2].Repeat)
	assert.Equal(t, uint64(3), spent(t, n, "pay", "k"))
	assert.Equal(t, uint64(1), spent(t, n, "pay", "j"))

	probe := idemChk(t, n, "pay", "p", "i")
	probe.Probe = true
	_, res = decideChecks(t, n, Request{Checks: []Check{probe}})
	_, res = decideChecks(t, n, Request{Checks: []Check{probe}})
	assert.False(t, res[0].Repeat, "a probe ignores its idempotency key")
}

func TestIdempotentAllOrNothing(t *testing.T) {
	t.Run("a repeat of an allowed request counts nothing", func(t *testing.T) {
		n := idemNode(t, "a", Config{})
		req := Request{Combine: All, Checks: []Check{idemChk(t, n, "pay", "k", "i"), idemChk(t, n, "glob", "k", "i"), idemChk(t, n, "watch", "k", "i")}}
		o, _ := decideChecks(t, n, req)
		require.True(t, o.Allowed)
		require.Equal(t, 3, o.Counted)
		o, res := decideChecks(t, n, req)
		assert.True(t, o.Allowed)
		assert.Zero(t, o.Counted)
		for i := range res {
			assert.True(t, res[i].Repeat, "%d", i)
		}
		assert.Equal(t, uint64(1), spent(t, n, "pay", "k"))
		assert.Equal(t, uint64(1), spent(t, n, "glob", "k"))
	})
	t.Run("a denied request remembers nothing and is decided again", func(t *testing.T) {
		n := idemNode(t, "a", Config{})
		for range 3 {
			decideOne(t, n, t0, chk(t, n, "glob", "k", 0))
		}
		req := Request{Combine: All, Checks: []Check{idemChk(t, n, "pay", "k", "i"), idemChk(t, n, "glob", "k", "i")}}
		o, _ := decideChecks(t, n, req)
		require.False(t, o.Allowed)
		later := t0 + int64(2*time.Minute)
		res := make([]Result, 2)
		o, err := n.DecideChecks(later, &req, res)
		require.NoError(t, err)
		assert.True(t, o.Allowed, "both fit now")
		assert.Equal(t, 2, o.Counted)
		assert.False(t, res[0].Repeat)
		assert.False(t, res[1].Repeat)
		assert.Equal(t, uint64(1), spent(t, n, "pay", "k"))
	})
	t.Run("the checks without an idempotency key are decided", func(t *testing.T) {
		n := idemNode(t, "a", Config{})
		req := Request{Combine: All, Checks: []Check{idemChk(t, n, "pay", "k", "i"), chk(t, n, "glob", "k", 0)}}
		for range 3 {
			o, _ := decideChecks(t, n, req)
			assert.True(t, o.Allowed)
		}
		o, res := decideChecks(t, n, req)
		assert.False(t, o.Allowed, "glob is spent")
		assert.True(t, res[0].Repeat)
		assert.Equal(t, uint64(1), spent(t, n, "pay", "k"))
		assert.Equal(t, uint64(3), spent(t, n, "glob", "k"))
	})
	t.Run("a repeat's cost is not summed with the request's others", func(t *testing.T) {
		n := idemNode(t, "a", Config{})
		a := idemChk(t, n, "pay", "k", "a")
		a.Cost = 2
		decideOne(t, n, t0, a)
		b := idemChk(t, n, "pay", "k", "b")
		o, res := decideChecks(t, n, Request{Combine: All, Strict: true, Checks: []Check{a, b}})
		assert.True(t, o.Allowed, "2 spent, 1 left for b")
		assert.True(t, res[0].Repeat)
		assert.True(t, res[1].Counted)
	})
}

// TestIdempotencyAcrossMembers: a decision remembered on one node of a PoP
// reaches the others with the counts (Flush, AntiEntropy, State, through
// the wire format); a retry there is a repeat and spends nothing.
func TestIdempotencyAcrossMembers(t *testing.T) {
	for _, via := range []string{"flush", "anti-entropy", "state"} {
		t.Run(via, func(t *testing.T) {
			a, b := idemNode(t, "a", Config{}), idemNode(t, "b", Config{})
			decideOne(t, a, t0, idemChk(t, a, "pay", "k", "i"))
			decideOne(t, a, t0, idemChk(t, a, "glob", "k", "i"))
			decideOne(t, a, t0, idemChk(t, a, "local", "k", "i"))
			var ds []wire.Delta
			switch via {
			case "flush":
				ds = []wire.Delta{a.Link().Flush(t0, nil).Local}
			case "anti-entropy":
				a.Link().Flush(t0, nil)
				ds = []wire.Delta{a.Link().AntiEntropy(t0, nil).Local}
			case "state":
				ds = a.Link().State(t0)
			}
			held := 0
			for i := range ds {
				held += memos.Section.Len(&ds[i])
				msgs, err := wire.Encode(&ds[i], 0)
				require.NoError(t, err)
				for _, m := range msgs {
					d, err := wire.Decode(m)
					require.NoError(t, err)
					b.Link().Apply(t0, d, ScopePoP)
				}
			}
			assert.Equal(t, 2, held, "pop and global rules' decisions; a node rule's stay on the node")
			for _, rule := range []string{"pay", "glob"} {
				r := decideOne(t, b, t0, idemChk(t, b, rule, "k", "i"))
				assert.True(t, r.Repeat, rule)
				assert.Equal(t, uint64(1), spent(t, b, rule, "k"), "%s: a's count only", rule)
			}
			assert.False(t, decideOne(t, b, t0, idemChk(t, b, "local", "k", "i")).Repeat)
			flushed := b.Link().Flush(t0, nil)
			assert.Empty(t, memos.Section.Items(&flushed.Local), "learnt decisions are not flushed again")
		})
	}
}

func TestIdempotencyFlushSendsOnlyNewDecisions(t *testing.T) {
	a := idemNode(t, "a", Config{})
	decideOne(t, a, t0, idemChk(t, a, "pay", "k", "i"))
	flushed := a.Link().Flush(t0, nil)
	assert.Len(t, memos.Section.Items(&flushed.Local), 1)
	decideOne(t, a, t0, idemChk(t, a, "pay", "k", "i")) // a repeat
	flushed = a.Link().Flush(t0, nil)
	assert.Empty(t, memos.Section.Items(&flushed.Local), "a repeat remembers nothing new")
	flushed = a.Link().Flush(t0, nil)
	assert.Empty(t, memos.Section.Items(&flushed.PoP), "never to other PoPs")
}

// TestIdempotencyHostileMemos: what a member sends is bounded: an
// unknown rule, a node-scope rule or a sender outside the PoP are refused,
// a denial is refused (only admissions are remembered), a decision
// remembered too long is clamped to now + TTL, and a flood of new decisions
// never holds more than the table's cap.
func TestIdempotencyHostileMemos(t *testing.T) {
	n := idemNode(t, "a", Config{MaxIdempotencyKeys: 100, IdempotencyTTL: time.Hour})
	id := memos.IDOf("k", "i", 1, "")
	member := *memos.Section.With(&wire.Delta{Sender: replica("b", 1), SentAt: t0}, []memos.Memo{
		{Rule: "nope", ID: id, Until: t0 + 1},
		{Rule: "local", ID: id, Until: t0 + 1},
		{Rule: "pay", ID: id, Until: t0 - 1, Verdict: memos.Allowed},
		{Rule: "pay", ID: id, Until: t0 + int64(time.Minute)}, // a denial
		{Rule: "pay", ID: id, Until: t0 + int64(1000*time.Hour), Verdict: memos.Allowed},
	}...)
	st := n.Link().Apply(t0, &member, ScopePoP)
	assert.Equal(t, 1, st.UnknownRule)
	assert.Equal(t, 1, st.WrongScope)
	assert.Equal(t, 1, st.BadEntry, "a denial")
	assert.Equal(t, 1, st.Memos.Expired)
	assert.Equal(t, 1, st.Memos.Merged)
	assert.Equal(t, 1, st.Memos.Clamped)
	bound := t0 + int64(time.Hour)
	allowed, ok := n.Remembered(bound-1, "pay", "k", "i", 0, "")
	assert.True(t, ok)
	assert.True(t, allowed)
	_, ok = n.Remembered(bound, "pay", "k", "i", 0, "")
	assert.False(t, ok, "clamped to now + ttl")

	foreign := *memos.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}}, memos.Section.Items(&member)...)
	assert.Equal(t, memos.Section.Len(&member), n.Link().Apply(t0, &foreign, ScopePoP).WrongScope)
	agg := *memos.Section.With(&wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1)}, memos.Section.Items(&member)...)
	assert.Equal(t, memos.Section.Len(&member), n.Link().Apply(t0, &agg, ScopeGlobal).WrongScope, "other PoPs send none")

	flood := wire.Delta{Sender: replica("b", 1)}
	for i := range 5000 {
		memos.Section.Append(&flood, memos.Memo{Rule: "pay", ID: memos.IDOf("k", strconv.Itoa(i), 1, ""), Until: t0 + int64(time.Minute) + int64(i), Verdict: memos.Allowed})
	}
	n.Link().Apply(t0, &flood, ScopePoP)
	assert.LessOrEqual(t, n.Stats().Memos.Len, 100)
}

func TestIdempotencyRuleRemoved(t *testing.T) {
	n := idemNode(t, "a", Config{})
	decideOne(t, n, t0, idemChk(t, n, "pay", "k", "i"))
	require.NoError(t, n.SetRules(idemRules()[1:]))
	require.NoError(t, n.SetRules(idemRules()))
	assert.True(t, decideOne(t, n, t0, idemChk(t, n, "pay", "k", "i")).Repeat, "a rule put back at once keeps its counts and decisions")
	require.NoError(t, n.SetRules(idemRules()[1:]))
	later := t0 + int64(5*time.Minute)
	n.Tick(later)
	n.Tick(later + int64(5*time.Minute))
	require.NoError(t, n.SetRules(idemRules()))
	assert.False(t, decideOne(t, n, later+int64(5*time.Minute), idemChk(t, n, "pay", "k", "i")).Repeat, "a rule dropped drops its decisions")
}
