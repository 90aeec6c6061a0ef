package pop

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// only admissions are remembered (a denial's retry after
// Retry-After is decided afresh), but a member's memo with no verdict
// (denied) is merged, and MergeMemo's "earliest until wins" lets it replace
// the allowed decision this node remembered. A hostile member (or a node of
// the PoP still running 00fec4f, which remembered denials) makes every
// retry of that idempotency key denied for the whole TTL, with a
// Retry-After of 0 while the key has room.
func TestMemberDenialIsNotRemembered(t *testing.T) {
	n := idemNode(t, "a", Config{IdempotencyTTL: time.Hour})
	first := decideOne(t, n, t0, idemChk(t, n, "pay", "k", "req-1"))
	require.True(t, first.Allowed)
	// The member saw the flushed memo (until t0+1h); it answers with the
	// same ID, until one nanosecond earlier, verdict 0.
	id := memos.IDOf("k", "req-1", 1, "")
	evil := *memos.Section.With(&wire.Delta{Sender: replica("b", 1), SentAt: t0}, []memos.Memo{
		{Rule: "pay", ID: id, Until: t0 + int64(time.Hour) - 1, Verdict: 0},
		// and a brand new key, never decided: denied for its first try too
		{Rule: "pay", ID: memos.IDOf("k", "req-2", 1, ""), Until: t0 + int64(time.Hour), Verdict: 0},
	}...)
	st := n.Link().Apply(t0, &evil, ScopePoP)
	assert.Equal(t, 0, st.Memos.Merged, "a member must not be able to remember a denial (nodes never do)")
	later := t0 + int64(30*time.Minute)
	again := decideOne(t, n, later, idemChk(t, n, "pay", "k", "req-1"))
	assert.True(t, again.Allowed, "the retry of an admitted request is admitted (repeat=%v retry_after=%s remaining=%d)",
		again.Repeat, again.RetryAfter, again.Remaining)
	fresh := decideOne(t, n, later, idemChk(t, n, "pay", "k", "req-2"))
	assert.True(t, fresh.Allowed, "a key never decided here is decided afresh (repeat=%v)", fresh.Repeat)
}

// the memo ID is (key, idempotency key) only: a repeat with a
// larger cost (the decision API takes "cost" from the caller) passes
// without spending anything, even with a cost that could never fit.
func TestRepeatWithALargerCostIsAnotherRequest(t *testing.T) {
	n := idemNode(t, "a", Config{})
	small := idemChk(t, n, "pay", "k", "i")
	small.Cost = 1
	require.True(t, decideOne(t, n, t0, small).Allowed)
	big := idemChk(t, n, "pay", "k", "i")
	big.Cost = 3 // the whole limit
	for range 10 {
		r := decideOne(t, n, t0, big)
		assert.False(t, r.Allowed && r.Repeat, "a cost-3 request admitted as a repeat of a cost-1 decision")
	}
	assert.Equal(t, uint64(1), spent(t, n, "pay", "k"))
}
