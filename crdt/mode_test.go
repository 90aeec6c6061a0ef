package crdt

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func sampleModes(rng *rand.Rand, n int) []RuleMode {
	rules := []string{"api", "login", "per-ip"}
	out := make([]RuleMode, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, RuleMode{
			Rule: rules[rng.IntN(len(rules))],
			Mode: uint8(rng.IntN(int(maxRuleMode) + 1)),
			At:   1_700_000_000_000_000_000 + rng.Int64N(1e12),
			By:   Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "n" + strconv.Itoa(rng.IntN(3)), Incarnation: rng.Uint64N(4) + 1},
		})
	}
	return out
}

// TestMergeRuleModeLaws checks last writer wins against a reference (the
// newest write by (At, By, Mode)) and the merge laws, on seeded random
// writes, some with equal times.
func TestMergeRuleModeLaws(t *testing.T) {
	seed := uint64(7)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 2000; i++ {
		ms := sampleModes(rng, 3)
		for j := range ms {
			ms[j].Rule = "api" // writes of one register
		}
		if rng.IntN(2) == 0 {
			ms[1].At = ms[0].At // ties are broken by the writer, then the mode
		}
		a, b, c := ms[0], ms[1], ms[2]
		require.Equal(t, MergeRuleMode(a, b), MergeRuleMode(b, a), "commutative (seed %d)", seed)
		require.Equal(t, MergeRuleMode(MergeRuleMode(a, b), c), MergeRuleMode(a, MergeRuleMode(b, c)), "associative (seed %d)", seed)
		require.Equal(t, a, MergeRuleMode(a, a), "idempotent")
		want := a
		for _, m := range ms[1:] {
			if m.At > want.At || (m.At == want.At && (m.By.String() > want.By.String() ||
				(m.By == want.By && m.Mode > want.Mode))) {
				want = m
			}
		}
		// The reference compares writers as strings; the names here make
		// that the same order as CompareReplicas.
		require.Equal(t, want, MergeRuleMode(MergeRuleMode(a, b), c), "newest wins (seed %d)", seed)
	}
}

func TestModesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	d := sampleDelta(rng, 2)
	d.Modes = sampleModes(rng, 5)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "counts and modes, two sections of one envelope")
	got, err := Decode(msgs[0])
	require.NoError(t, err)
	sameEntries(t, d.Entries, got.Entries)
	assert.Equal(t, d.Modes, got.Modes)
	assert.Equal(t, d.Sender, got.Sender)
	assert.Equal(t, d.Epoch, got.Epoch)

	only := &Delta{Sender: d.Sender, SentAt: 5, Modes: d.Modes[:1]}
	msgs, err = Encode(only, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []SectionKind{SectionModes}, sectionKinds(t, msgs[0]), "modes only: no empty counts section")
	got, err = Decode(msgs[0])
	require.NoError(t, err)
	assert.Equal(t, only.Modes, got.Modes)
}

func TestModesSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	d := &Delta{Sender: sampleDelta(rng, 0).Sender, Modes: sampleModes(rng, 1000)}
	msgs, err := Encode(d, 4096)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 1)
	var back []RuleMode
	for _, m := range msgs {
		assert.LessOrEqual(t, len(m), 4096)
		got, err := Decode(m)
		require.NoError(t, err)
		back = append(back, got.Modes...)
	}
	assert.Equal(t, d.Modes, back)
}

func TestModesEncodeRefuses(t *testing.T) {
	self := Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}
	for name, m := range map[string]RuleMode{
		"empty rule":    {Mode: RuleModeOff, By: self},
		"bad mode":      {Rule: "api", Mode: 9, By: self},
		"bad writer":    {Rule: "api", Mode: RuleModeOff, By: Replica{Node: "n1"}},
		"long rule":     {Rule: string(make([]byte, MaxRuleNameLen+1)), By: self},
		"writer w/ dot": {Rule: "api", By: Replica{PoPID: PoPID{Region: "e.u", PoP: "ams"}, Node: "n1"}},
	} {
		_, err := Encode(&Delta{Sender: self, Modes: []RuleMode{m}}, 0)
		assert.Error(t, err, name)
	}
}

// TestModesDecodeHostile refuses mode messages that are malformed: a mode
// out of range, a bad writer, a wrong element count, a huge count, an
// extended version 5.
func TestModesDecodeHostile(t *testing.T) {
	enc := func(fn func(e *msgpack.Encoder)) []byte {
		var buf bytesBuffer
		e := msgpack.NewEncoder(&buf)
		fn(e)
		return buf.b
	}
	header := func(e *msgpack.Encoder, fields int) {
		_ = e.EncodeArrayLen(fields)
		_ = e.EncodeUint(ModeVersion)
		_ = e.EncodeArrayLen(4)
		_ = e.EncodeString("eu")
		_ = e.EncodeString("ams")
		_ = e.EncodeString("n1")
		_ = e.EncodeUint(1)
		_ = e.EncodeInt(5)
		_ = e.EncodeUint(0)
	}
	item := func(e *msgpack.Encoder, mode uint64, node string) {
		_ = e.EncodeString("api")
		_ = e.EncodeUint(mode)
		_ = e.EncodeInt(7)
		_ = e.EncodeString("eu")
		_ = e.EncodeString("ams")
		_ = e.EncodeString(node)
		_ = e.EncodeUint(1)
	}
	good := enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7); item(e, 3, "n1") })
	d, err := Decode(good)
	require.NoError(t, err)
	require.Equal(t, []RuleMode{{Rule: "api", Mode: RuleModeOff, At: 7, By: Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}}}, d.Modes)
	for name, b := range map[string][]byte{
		"mode out of range": enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7); item(e, 4, "n1") }),
		"writer with a dot": enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7); item(e, 1, "n.1") }),
		"not whole items":   enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(6); item(e, 1, "n1") }),
		"huge count":        enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7 * 100000) }),
		"eight fields":      enc(func(e *msgpack.Encoder) { header(e, 8); _ = e.EncodeArrayLen(0) }),
		"truncated":         good[:len(good)-3],
		"trailing bytes":    append(append([]byte{}, good...), 0),
	} {
		_, err := Decode(b)
		assert.ErrorIs(t, err, ErrDeltaMalformed, name)
	}
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
