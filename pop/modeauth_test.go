package pop

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/modes"
)

func modeKey(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return ed25519.NewKeyFromSeed(s)
}

func newNodeWith(t *testing.T, self identity.Replica, auth *modes.Authority) *Node {
	t.Helper()
	n, err := New(Config{Self: self, Rules: testRules(), ModeAuthority: auth})
	require.NoError(t, err)
	return n
}

// The kill switch pinned: a sender re-sends "off" every 100 ms dated 1.9 s
// ahead (inside MaxSkew), the attack that beat an operator's PUT. With a
// mode authority the forger holds no key: its writes are refused, signed
// by another key or not at all, and the operator's write holds on every
// node. The same forger without keys on the victim is refused only for
// naming a writer of another PoP than its own.
func TestModeAuthorityHoldsAgainstForgedResends(t *testing.T) {
	operatorKey, forgerKey := modeKey(1), modeKey(2)
	pub := operatorKey.Public().(ed25519.PublicKey)
	operator := newNodeWith(t, replica("op", 1), modes.NewAuthority(nil, operatorKey))
	victim := newNodeWith(t, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "iad-1", Incarnation: 1},
		modes.NewAuthority([]ed25519.PublicKey{pub}, nil))
	from := modes.Source{PoP: operator.Link().Self().PoPID}

	_, err := victim.SetRuleMode(t0, "api", modes.Off)
	assert.ErrorIs(t, err, modes.ErrNoSignKey, "a node without the sign key cannot set modes")

	w := setMode(t, operator, t0, "api", "shadow")
	require.True(t, w.IsSigned())
	victim.Link().MergeModes(t0, from, []modes.RuleMode{w})
	forger := modes.NewAuthority(nil, forgerKey)
	for step := range 20 {
		now := t0 + int64(step)*int64(100*time.Millisecond)
		pin := modes.RuleMode{Rule: "api", Mode: modes.Off, At: now + int64(1900*time.Millisecond), By: operator.Link().Self()}
		victim.Link().MergeModes(now, from, []modes.RuleMode{pin}) // unsigned, in the operator's name
		forger.Sign(&pin)
		victim.Link().MergeModes(now, from, []modes.RuleMode{pin}) // signed by a key nobody trusts
		st, _ := victim.RuleMode("api")
		require.Equal(t, Shadow, st.Effective, "step %d: the operator's write holds", step)
	}
	assert.Equal(t, uint64(40), victim.Stats().Modes.Untrusted)

	// Without keys: a write in another PoP's name is refused (set_by is
	// the sender's); the sending PoP's own is taken, and a write made
	// later on a node is dated after it (hybrid logical clock), so it wins
	// there whatever date the other gave its own.
	open := newNode(t, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "iad-2", Incarnation: 1})
	evil := identity.PoPID{Region: "ap", PoP: "sin"}
	forged := modes.RuleMode{Rule: "api", Mode: modes.Off, At: t0, By: replica("ams-1", 1)}
	open.Link().MergeModes(t0, modes.Source{PoP: evil}, []modes.RuleMode{forged})
	st, _ := open.RuleMode("api")
	assert.Equal(t, Enforce, st.Effective, "set_by forged")
	assert.Equal(t, uint64(1), open.Stats().Modes.Untrusted)
	own := modes.RuleMode{Rule: "api", Mode: modes.Off, At: t0 + int64(1900*time.Millisecond), By: identity.Replica{PoPID: evil, Node: "sin-1", Incarnation: 1}}
	open.Link().MergeModes(t0, modes.Source{PoP: evil}, []modes.RuleMode{own})
	st, _ = open.RuleMode("api")
	assert.Equal(t, Off, st.Effective)
	put := setMode(t, open, t0, "api", "enforce")
	assert.Greater(t, put.At, own.At, "dated after every write held")
	st, _ = open.RuleMode("api")
	assert.Equal(t, Enforce, st.Effective)
}

// A batch of thousands of forged writes of one rule costs one signature
// check, not one each: only the batch's newest write of a rule can win, and
// only a write that would win is checked.
func TestModeAuthorityChecksOneWriteOfARule(t *testing.T) {
	opKey, forgerKey := modeKey(1), modeKey(2)
	victim := newNodeWith(t, replica("v", 1), modes.NewAuthority([]ed25519.PublicKey{opKey.Public().(ed25519.PublicKey)}, nil))
	forger := modes.NewAuthority(nil, forgerKey)
	batch := make([]modes.RuleMode, 5000)
	for i := range batch {
		batch[i] = modes.RuleMode{Rule: "api", Mode: modes.Off, At: t0 + int64(i), By: replica("x", 1)}
		forger.Sign(&batch[i])
	}
	victim.Link().MergeModes(t0+int64(time.Second), modes.Source{PoP: identity.PoPID{Region: "us", PoP: "iad"}}, batch)
	st := victim.Stats().Modes
	assert.Equal(t, uint64(1), st.Untrusted, "one check")
	assert.Equal(t, uint64(len(batch)-1), st.Unchanged)
	rm, _ := victim.RuleMode("api")
	assert.Equal(t, Enforce, rm.Effective)
}
