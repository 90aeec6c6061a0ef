package wire

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/replicated/inflight"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire/codec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// ---- blocks
func sampleBlocks(rng *rand.Rand, n int) []blocks.Block {
	rules := []string{"login", "otp"}
	out := make([]blocks.Block, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, blocks.Block{
			Rule:  rules[rng.IntN(len(rules))],
			Key:   "user-" + strconv.Itoa(rng.IntN(1000)),
			Until: 1_700_000_000_000_000_000 + rng.Int64N(1e12),
		})
	}
	return out
}

// sameBlocks compares blocks ignoring order (Encode groups by rule).
func sameBlocks(t *testing.T, want, got []blocks.Block) { t.Helper(); sameMultiset(t, want, got) }

func sameMultiset[T comparable](t *testing.T, want, got []T) {
	t.Helper()
	count := map[T]int{}
	for _, x := range want {
		count[x]++
	}
	for _, x := range got {
		count[x]--
	}
	for x, c := range count {
		assert.Zero(t, c, "%+v", x)
	}
}

func TestDeltaBlocksRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tests := []struct {
		name              string
		entries, blocks   int
		maxBytes          int
		wantV2, wantV3min int
	}{
		{"blocks only", 0, 3, 0, 0, 1},
		{"entries and blocks, one message", 5, 3, 0, 1, 1},
		{"split under max bytes", 50, 400, 2048, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sampleDelta(rng, tt.entries)
			d.Blocks = sampleBlocks(rng, tt.blocks)
			msgs, err := Encode(d, tt.maxBytes)
			require.NoError(t, err)
			var back Delta
			v2, v3 := 0, 0
			for _, m := range msgs {
				if tt.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tt.maxBytes)
				}
				part, err := Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				assert.Equal(t, d.Epoch, part.Epoch)
				if len(part.Blocks) > 0 {
					v3++
				}
				if len(part.Entries) > 0 {
					v2++
				}
				back.Entries = append(back.Entries, part.Entries...)
				back.Blocks = append(back.Blocks, part.Blocks...)
			}
			assert.Equal(t, tt.wantV2, v2)
			assert.GreaterOrEqual(t, v3, tt.wantV3min)
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, d.Blocks, back.Blocks)
		})
	}
}

func TestDeltaBlocksOneEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	d := sampleDelta(rng, 4)
	d.Blocks = sampleBlocks(rng, 2)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []SectionKind{SectionCounts, SectionBlocks}, sectionKinds(t, msgs[0]))
}

func TestDecodeHostileBlocks(t *testing.T) {
	sender := []any{"eu", "ams", "n1", 1}
	tests := []struct {
		name   string
		blocks any
	}{
		{"odd elements", []any{[]any{"login", []any{"k", 5, "j"}}}},
		{"empty key", []any{[]any{"login", []any{"", 5}}}},
		{"empty rule", []any{[]any{"", []any{"k", 5}}}},
		{"long key", []any{[]any{"login", []any{string(make([]byte, codec.MaxKeyLen+1)), 5}}}},
		{"time as string", []any{[]any{"login", []any{"k", "5"}}}},
		{"group of three", []any{[]any{"login", []any{"k", 5}, 1}}},
		{"not an array", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Delta{Blocks: []blocks.Block{{Rule: "x", Key: "y", Until: 1}}}
			err := NewDecoder().Decode(mp(t, []any{3, sender, 5, 1, []any{}, tt.blocks}), &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrDeltaMalformed), "%v", err)
			assert.Empty(t, out.Blocks)
		})
	}
	// A huge length prefix is refused before anything is allocated.
	b := unhex("96 03 94 a26575 a3616d73 a26e31 01 05 01 90 91 92 a56c6f67696e dd 7fffffff")
	_, err := Decode(b)
	assert.ErrorIs(t, err, ErrDeltaMalformed)
}

// ---- memos
func sampleMemos(rng *rand.Rand, n int) []memos.Memo {
	rules := []string{"pay", "api"}
	out := make([]memos.Memo, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, memos.Memo{
			Rule:    rules[rng.IntN(len(rules))],
			ID:      memos.IDOf("k"+strconv.Itoa(rng.IntN(100)), "idem-"+strconv.Itoa(rng.IntN(1000)), 1, ""),
			Until:   1_700_000_000_000_000_000 + rng.Int64N(1e12),
			Verdict: memos.Verdict(rng.IntN(4)),
		})
	}
	return out
}

// sameMemos compares memos ignoring order (Encode groups by rule).
func sameMemos(t *testing.T, want, got []memos.Memo) { t.Helper(); sameMultiset(t, want, got) }

func TestDeltaMemosRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	tests := []struct {
		name                   string
		entries, blocks, memos int
		maxBytes               int
		wantMsgs               int // 0: more than one
	}{
		{"memos only", 0, 0, 3, 0, 1},
		{"entries, blocks and memos in one message", 5, 2, 3, 0, 1},
		{"split under max bytes", 20, 0, 400, 2048, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sampleDelta(rng, tt.entries)
			d.Blocks = sampleBlocks(rng, tt.blocks)
			d.Memos = sampleMemos(rng, tt.memos)
			msgs, err := Encode(d, tt.maxBytes)
			require.NoError(t, err)
			var back Delta
			if tt.wantMsgs > 0 {
				assert.Len(t, msgs, tt.wantMsgs)
			} else {
				assert.Greater(t, len(msgs), 1)
			}
			for _, m := range msgs {
				if tt.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tt.maxBytes)
				}
				part, err := Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				back.Entries = append(back.Entries, part.Entries...)
				back.Blocks = append(back.Blocks, part.Blocks...)
				back.Memos = append(back.Memos, part.Memos...)
			}
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, d.Blocks, back.Blocks)
			sameMemos(t, d.Memos, back.Memos)
		})
	}
}

func TestDeltaMemosOneEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	d := sampleDelta(rng, 2)
	d.Memos = sampleMemos(rng, 2)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []SectionKind{SectionCounts, SectionMemos}, sectionKinds(t, msgs[0]))
}

func TestDecodeHostileMemos(t *testing.T) {
	sender := []any{"eu", "ams", "n1", 1}
	id := make([]byte, 16)
	tests := []struct {
		name  string
		memos any
	}{
		{"not a multiple of three", []any{[]any{"pay", []any{id, 5}}}},
		{"short id", []any{[]any{"pay", []any{id[:15], 5, 1}}}},
		{"long id", []any{[]any{"pay", []any{append(id, 0), 5, 1}}}},
		{"empty rule", []any{[]any{"", []any{id, 5, 1}}}},
		{"unknown verdict bits", []any{[]any{"pay", []any{id, 5, 4}}}},
		{"negative verdict", []any{[]any{"pay", []any{id, 5, -1}}}},
		{"time as string", []any{[]any{"pay", []any{id, "5", 1}}}},
		{"group of three", []any{[]any{"pay", []any{id, 5, 1}, 1}}},
		{"not an array", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Delta{Memos: []memos.Memo{{Rule: "x", Until: 1}}}
			err := NewDecoder().Decode(mp(t, []any{4, sender, 5, 1, []any{}, []any{}, tt.memos}), &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrDeltaMalformed), "%v", err)
			assert.Empty(t, out.Memos)
		})
	}
	t.Run("wrong arity for version 4", func(t *testing.T) {
		_, err := Decode(mp(t, []any{4, sender, 5, 1, []any{}, []any{}}))
		assert.ErrorIs(t, err, ErrDeltaMalformed)
	})
	t.Run("version 8", func(t *testing.T) {
		_, err := Decode(mp(t, []any{8, sender, 5, 1, []any{}, []any{}, []any{}, []any{}, []any{}}))
		assert.ErrorIs(t, err, ErrDeltaVersion)
	})
	// A huge length prefix is refused before anything is allocated.
	b := unhex("97 04 94 a26575 a3616d73 a26e31 01 05 01 90 90 91 92 a3706179 dd 7fffffff")
	_, err := Decode(b)
	assert.ErrorIs(t, err, ErrDeltaMalformed)
}

// ---- modes
func sampleModes(rng *rand.Rand, n int) []modes.RuleMode {
	rules := []string{"api", "login", "per-ip"}
	out := make([]modes.RuleMode, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, modes.RuleMode{
			Rule: rules[rng.IntN(len(rules))],
			Mode: uint8(rng.IntN(int(modes.Off) + 1)),
			At:   1_700_000_000_000_000_000 + rng.Int64N(1e12),
			By:   identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n" + strconv.Itoa(rng.IntN(3)), Incarnation: rng.Uint64N(4) + 1},
		})
	}
	return out
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
	var back []modes.RuleMode
	for _, m := range msgs {
		assert.LessOrEqual(t, len(m), 4096)
		got, err := Decode(m)
		require.NoError(t, err)
		back = append(back, got.Modes...)
	}
	assert.Equal(t, d.Modes, back)
}

func TestModesEncodeRefuses(t *testing.T) {
	self := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}
	for name, m := range map[string]modes.RuleMode{
		"empty rule":    {Mode: modes.Off, By: self},
		"bad mode":      {Rule: "api", Mode: 9, By: self},
		"bad writer":    {Rule: "api", Mode: modes.Off, By: identity.Replica{Node: "n1"}},
		"long rule":     {Rule: string(make([]byte, codec.MaxRuleNameLen+1)), By: self},
		"writer w/ dot": {Rule: "api", By: identity.Replica{PoPID: identity.PoPID{Region: "e.u", PoP: "ams"}, Node: "n1"}},
	} {
		_, err := Encode(&Delta{Sender: self, Modes: []modes.RuleMode{m}}, 0)
		assert.Error(t, err, name)
	}
}

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
	require.Equal(t, []modes.RuleMode{{Rule: "api", Mode: modes.Off, At: 7, By: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}}}, d.Modes)
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

// ---- inflight
func sampleInflight(rng *rand.Rand, n int) []inflight.Count {
	rules := []string{"uploads", "api"}
	out := make([]inflight.Count, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, inflight.Count{
			Rule:    rules[rng.IntN(len(rules))],
			Key:     "10.0.0." + strconv.Itoa(rng.IntN(256)),
			Count:   uint64(rng.IntN(50)),
			Version: rng.Uint64N(1 << 40),
		})
	}
	return out
}

func TestDeltaInflightRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, tc := range []struct {
		name            string
		entries, blocks int
		inflight        int
		maxBytes        int
	}{
		{name: "alone", inflight: 3},
		{name: "with counts and blocks", entries: 4, blocks: 2, inflight: 5},
		{name: "split over messages", inflight: 400, maxBytes: 1400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := sampleDelta(rng, tc.entries)
			d.Blocks = sampleBlocks(rng, tc.blocks)
			d.Inflight = sampleInflight(rng, tc.inflight)
			msgs, err := Encode(d, tc.maxBytes)
			require.NoError(t, err)
			var back Delta
			for _, m := range msgs {
				if tc.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tc.maxBytes)
				}
				part, err := Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				back.Entries = append(back.Entries, part.Entries...)
				back.Blocks = append(back.Blocks, part.Blocks...)
				back.Inflight = append(back.Inflight, part.Inflight...)
			}
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, d.Blocks, back.Blocks)
			sameMultiset(t, d.Inflight, back.Inflight)
		})
	}
}

func TestDeltaInflightRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	d := sampleDelta(rng, 0)
	d.Inflight = []inflight.Count{{Rule: "uploads", Key: "", Count: 1, Version: 1}}
	_, err := Encode(d, 0)
	require.Error(t, err, "an empty key is not encoded")
	d.Inflight = []inflight.Count{{Rule: "", Key: "k", Count: 1, Version: 1}}
	_, err = Encode(d, 0)
	require.Error(t, err, "an empty rule name is not encoded")

	d.Inflight = sampleInflight(rng, 2)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	good := msgs[len(msgs)-1]
	for i := 1; i < len(good); i++ {
		_, err := Decode(good[:i])
		require.Error(t, err, "truncated at %d", i)
		assert.True(t, errors.Is(err, ErrDeltaMalformed), "truncated at %d: %v", i, err)
	}
}
