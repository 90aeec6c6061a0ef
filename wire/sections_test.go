package wire_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/geolimit/geolimit/wire"

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

// sameBlocks compares blocks ignoring order (wire.Encode groups by rule).
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
			blocks.Section.Set(d, sampleBlocks(rng, tt.blocks))
			msgs, err := wire.Encode(d, tt.maxBytes)
			require.NoError(t, err)
			var back wire.Delta
			v2, v3 := 0, 0
			for _, m := range msgs {
				if tt.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tt.maxBytes)
				}
				part, err := wire.Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				assert.Equal(t, d.Epoch, part.Epoch)
				if blocks.Section.Len(part) > 0 {
					v3++
				}
				if len(part.Entries) > 0 {
					v2++
				}
				back.Entries = append(back.Entries, part.Entries...)
				blocks.Section.Append(&back, blocks.Section.Items(part)...)
			}
			assert.Equal(t, tt.wantV2, v2)
			assert.GreaterOrEqual(t, v3, tt.wantV3min)
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, blocks.Section.Items(d), blocks.Section.Items(&back))
		})
	}
}

func TestDeltaBlocksOneEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	d := sampleDelta(rng, 4)
	blocks.Section.Set(d, sampleBlocks(rng, 2))
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []wire.SectionKind{wire.SectionCounts, blocks.Section.Kind()}, sectionKinds(t, msgs[0]))
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
			out := *blocks.Section.With(&wire.Delta{}, []blocks.Block{{Rule: "x", Key: "y", Until: 1}}...)
			err := wire.NewDecoder().Decode(mp(t, []any{3, sender, 5, 1, []any{}, tt.blocks}), &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, wire.ErrDeltaMalformed), "%v", err)
			assert.Empty(t, blocks.Section.Items(&out))
		})
	}
	// A huge length prefix is refused before anything is allocated.
	b := unhex("96 03 94 a26575 a3616d73 a26e31 01 05 01 90 91 92 a56c6f67696e dd 7fffffff")
	_, err := wire.Decode(b)
	assert.ErrorIs(t, err, wire.ErrDeltaMalformed)
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

// sameMemos compares memos ignoring order (wire.Encode groups by rule).
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
			blocks.Section.Set(d, sampleBlocks(rng, tt.blocks))
			memos.Section.Set(d, sampleMemos(rng, tt.memos))
			msgs, err := wire.Encode(d, tt.maxBytes)
			require.NoError(t, err)
			var back wire.Delta
			if tt.wantMsgs > 0 {
				assert.Len(t, msgs, tt.wantMsgs)
			} else {
				assert.Greater(t, len(msgs), 1)
			}
			for _, m := range msgs {
				if tt.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tt.maxBytes)
				}
				part, err := wire.Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				back.Entries = append(back.Entries, part.Entries...)
				blocks.Section.Append(&back, blocks.Section.Items(part)...)
				memos.Section.Append(&back, memos.Section.Items(part)...)
			}
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, blocks.Section.Items(d), blocks.Section.Items(&back))
			sameMemos(t, memos.Section.Items(d), memos.Section.Items(&back))
		})
	}
}

func TestDeltaMemosOneEnvelope(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	d := sampleDelta(rng, 2)
	memos.Section.Set(d, sampleMemos(rng, 2))
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []wire.SectionKind{wire.SectionCounts, memos.Section.Kind()}, sectionKinds(t, msgs[0]))
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
			out := *memos.Section.With(&wire.Delta{}, []memos.Memo{{Rule: "x", Until: 1}}...)
			err := wire.NewDecoder().Decode(mp(t, []any{4, sender, 5, 1, []any{}, []any{}, tt.memos}), &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, wire.ErrDeltaMalformed), "%v", err)
			assert.Empty(t, memos.Section.Items(&out))
		})
	}
	t.Run("wrong arity for version 4", func(t *testing.T) {
		_, err := wire.Decode(mp(t, []any{4, sender, 5, 1, []any{}, []any{}}))
		assert.ErrorIs(t, err, wire.ErrDeltaMalformed)
	})
	t.Run("version 8", func(t *testing.T) {
		_, err := wire.Decode(mp(t, []any{8, sender, 5, 1, []any{}, []any{}, []any{}, []any{}, []any{}}))
		assert.ErrorIs(t, err, wire.ErrDeltaVersion)
	})
	// A huge length prefix is refused before anything is allocated.
	b := unhex("97 04 94 a26575 a3616d73 a26e31 01 05 01 90 90 91 92 a3706179 dd 7fffffff")
	_, err := wire.Decode(b)
	assert.ErrorIs(t, err, wire.ErrDeltaMalformed)
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
	modes.Section.Set(d, sampleModes(rng, 5))
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "counts and modes, two sections of one envelope")
	got, err := wire.Decode(msgs[0])
	require.NoError(t, err)
	sameEntries(t, d.Entries, got.Entries)
	assert.Equal(t, modes.Section.Items(d), modes.Section.Items(got))
	assert.Equal(t, d.Sender, got.Sender)
	assert.Equal(t, d.Epoch, got.Epoch)

	only := modes.Section.With(&wire.Delta{Sender: d.Sender, SentAt: 5}, modes.Section.Items(d)[:1]...)
	msgs, err = wire.Encode(only, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []wire.SectionKind{modes.Section.Kind()}, sectionKinds(t, msgs[0]), "modes only: no empty counts section")
	got, err = wire.Decode(msgs[0])
	require.NoError(t, err)
	assert.Equal(t, modes.Section.Items(only), modes.Section.Items(got))
}

func TestModesSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	d := modes.Section.With(&wire.Delta{Sender: sampleDelta(rng, 0).Sender}, sampleModes(rng, 1000)...)
	msgs, err := wire.Encode(d, 4096)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 1)
	var back []modes.RuleMode
	for _, m := range msgs {
		assert.LessOrEqual(t, len(m), 4096)
		got, err := wire.Decode(m)
		require.NoError(t, err)
		back = append(back, modes.Section.Items(got)...)
	}
	assert.Equal(t, modes.Section.Items(d), back)
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
		_, err := wire.Encode(modes.Section.With(&wire.Delta{Sender: self}, []modes.RuleMode{m}...), 0)
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
		_ = e.EncodeUint(wire.ModeVersion)
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
	d, err := wire.Decode(good)
	require.NoError(t, err)
	require.Equal(t, []modes.RuleMode{{Rule: "api", Mode: modes.Off, At: 7, By: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}}}, modes.Section.Items(d))
	for name, b := range map[string][]byte{
		"mode out of range": enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7); item(e, 4, "n1") }),
		"writer with a dot": enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7); item(e, 1, "n.1") }),
		"not whole items":   enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(6); item(e, 1, "n1") }),
		"huge count":        enc(func(e *msgpack.Encoder) { header(e, 5); _ = e.EncodeArrayLen(7 * 100000) }),
		"eight fields":      enc(func(e *msgpack.Encoder) { header(e, 8); _ = e.EncodeArrayLen(0) }),
		"truncated":         good[:len(good)-3],
		"trailing bytes":    append(append([]byte{}, good...), 0),
	} {
		_, err := wire.Decode(b)
		assert.ErrorIs(t, err, wire.ErrDeltaMalformed, name)
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
			blocks.Section.Set(d, sampleBlocks(rng, tc.blocks))
			inflight.Section.Set(d, sampleInflight(rng, tc.inflight))
			msgs, err := wire.Encode(d, tc.maxBytes)
			require.NoError(t, err)
			var back wire.Delta
			for _, m := range msgs {
				if tc.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tc.maxBytes)
				}
				part, err := wire.Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				back.Entries = append(back.Entries, part.Entries...)
				blocks.Section.Append(&back, blocks.Section.Items(part)...)
				inflight.Section.Append(&back, inflight.Section.Items(part)...)
			}
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, blocks.Section.Items(d), blocks.Section.Items(&back))
			sameMultiset(t, inflight.Section.Items(d), inflight.Section.Items(&back))
		})
	}
}

func TestDeltaInflightRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	d := sampleDelta(rng, 0)
	inflight.Section.Set(d, []inflight.Count{{Rule: "uploads", Key: "", Count: 1, Version: 1}})
	_, err := wire.Encode(d, 0)
	require.Error(t, err, "an empty key is not encoded")
	inflight.Section.Set(d, []inflight.Count{{Rule: "", Key: "k", Count: 1, Version: 1}})
	_, err = wire.Encode(d, 0)
	require.Error(t, err, "an empty rule name is not encoded")

	inflight.Section.Set(d, sampleInflight(rng, 2))
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	good := msgs[len(msgs)-1]
	for i := 1; i < len(good); i++ {
		_, err := wire.Decode(good[:i])
		require.Error(t, err, "truncated at %d", i)
		assert.True(t, errors.Is(err, wire.ErrDeltaMalformed), "truncated at %d: %v", i, err)
	}
}
