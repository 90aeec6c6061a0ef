package wire_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/geolimit/geolimit/wire"

	"github.com/geolimit/geolimit/crdt"
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

func seeded(t *testing.T, seed uint64) *rand.Rand {
	t.Helper()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func sampleDelta(rng *rand.Rand, n int) *wire.Delta {
	d := &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: rng.Uint64()}, SentAt: rng.Int64(), Epoch: rng.Uint64()}
	rules := []string{"per-ip", "api", "login"}
	for i := 0; i < n; i++ {
		d.Entries = append(d.Entries, crdt.Entry{
			Rule:   rules[rng.IntN(len(rules))],
			Key:    strconv.Itoa(rng.IntN(256)) + "." + strconv.Itoa(rng.IntN(256)) + ".0.1",
			Window: 29_000_000 + int64(rng.IntN(3)),
			Count:  uint64(rng.IntN(1000)),
		})
	}
	return d
}

// sameEntries compares entries ignoring order (wire.Encode groups by rule).
func sameEntries(t *testing.T, want, got []crdt.Entry) {
	t.Helper()
	count := map[crdt.Entry]int{}
	for _, e := range want {
		count[e]++
	}
	for _, e := range got {
		count[e]--
	}
	for e, c := range count {
		assert.Zero(t, c, "entry %+v", e)
	}
}

func TestDeltaRoundTrip(t *testing.T) {
	rng := seeded(t, 3)
	for _, n := range []int{0, 1, 17, 1000} {
		d := sampleDelta(rng, n)
		msgs, err := wire.Encode(d, 0)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		got, err := wire.Decode(msgs[0])
		require.NoError(t, err)
		assert.Equal(t, d.Sender, got.Sender)
		assert.Equal(t, d.SentAt, got.SentAt)
		assert.Equal(t, d.Epoch, got.Epoch)
		sameEntries(t, d.Entries, got.Entries)
	}
}

// TestDeltaEpochRoundTrip: the epoch survives encoding at its edge values,
// from node and PoP senders alike, and a reused wire.Delta is overwritten.
func TestDeltaEpochRoundTrip(t *testing.T) {
	dec := wire.NewDecoder()
	var got wire.Delta
	for _, tt := range []struct {
		sender identity.Replica
		epoch  uint64
	}{
		{identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 9}, 0},
		{identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 9}, 1},
		{identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 42), 42},
		{identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, math.MaxUint64), math.MaxUint64},
		{identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 9}, 0},
	} {
		d := &wire.Delta{Sender: tt.sender, SentAt: 5, Epoch: tt.epoch, Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: 7, Count: 1}}}
		msgs, err := wire.Encode(d, 0)
		require.NoError(t, err)
		require.NoError(t, dec.Decode(msgs[0], &got))
		assert.Equal(t, tt.epoch, got.Epoch)
		assert.Equal(t, tt.sender, got.Sender)
		assert.Equal(t, tt.sender.IsPoP(), got.Sender.IsPoP())
		assert.Equal(t, d.Entries, got.Entries)
	}
}

// TestDecodeVersions: version 2 carries the epoch, version 1 (no epoch) still
// decodes with epoch 0, and the array length must match the version.
func TestDecodeVersions(t *testing.T) {
	sender := []any{"eu", "ams", "n1", 1}
	groups := []any{[]any{"api", 100, []any{"k", 0, 3}}}
	tests := []struct {
		name  string
		in    []byte
		epoch uint64
		want  error
	}{
		{"v2", mp(t, []any{2, sender, 5, 77, groups}), 77, nil},
		{"v2 epoch 0", mp(t, []any{2, sender, 5, 0, groups}), 0, nil},
		{"v1", mp(t, []any{1, sender, 5, groups}), 0, nil},
		{"v1 with an epoch", mp(t, []any{1, sender, 5, 77, groups}), 0, wire.ErrDeltaMalformed},
		{"v2 without an epoch", mp(t, []any{2, sender, 5, groups}), 0, wire.ErrDeltaMalformed},
		{"v3 without blocks", mp(t, []any{3, sender, 5, 77, groups}), 0, wire.ErrDeltaMalformed},
		{"v3", mp(t, []any{3, sender, 5, 77, groups, []any{}}), 77, nil},
		{"v4 without memos", mp(t, []any{4, sender, 5, 77, groups, []any{}}), 0, wire.ErrDeltaMalformed},
		{"v4", mp(t, []any{4, sender, 5, 77, groups, []any{}, []any{}}), 77, nil},
		{"v5 without modes", mp(t, []any{5, sender, 5, 77}), 0, wire.ErrDeltaMalformed},
		{"v5 extending v4", mp(t, []any{5, sender, 5, 77, groups, []any{}, []any{}, []any{}}), 0, wire.ErrDeltaMalformed},
		{"v6 without in-flight counts", mp(t, []any{6, sender, 5, 77}), 0, wire.ErrDeltaMalformed},
		{"v6 extending v5", mp(t, []any{6, sender, 5, 77, groups, []any{}, []any{}, []any{}, []any{}}), 0, wire.ErrDeltaMalformed},
		{"v7 without sections", mp(t, []any{7, sender, 5, 77}), 0, wire.ErrDeltaMalformed},
		{"v8", mp(t, []any{8, sender, 5, 77, []any{}}), 0, wire.ErrDeltaVersion},
		{"v0", mp(t, []any{0, sender, 5, groups}), 0, wire.ErrDeltaVersion},
		{"six elements", mp(t, []any{2, sender, 5, 77, groups, 1}), 0, wire.ErrDeltaMalformed},
		{"three elements", mp(t, []any{2, sender, 5}), 0, wire.ErrDeltaMalformed},
		{"negative epoch", mp(t, []any{2, sender, 5, -1, groups}), 0, wire.ErrDeltaMalformed},
		{"epoch as string", mp(t, []any{2, sender, 5, "1", groups}), 0, wire.ErrDeltaMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := wire.Delta{Epoch: 99}
			err := wire.NewDecoder().Decode(tt.in, &out)
			if tt.want != nil {
				require.Error(t, err)
				assert.True(t, errors.Is(err, tt.want), "got %v, want %v", err, tt.want)
				assert.Empty(t, out.Entries)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.epoch, out.Epoch)
			assert.Equal(t, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}, out.Sender)
			assert.Equal(t, []crdt.Entry{{Rule: "api", Key: "k", Window: 100, Count: 3}}, out.Entries)
		})
	}
}

func TestDeltaEdgeValues(t *testing.T) {
	d := &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "r", PoP: "p"}, Node: "n", Incarnation: math.MaxUint64}, SentAt: math.MinInt64, Entries: []crdt.Entry{
		{Rule: strings.Repeat("r", codec.MaxRuleNameLen), Key: strings.Repeat("k", codec.MaxKeyLen), Window: math.MaxInt64, Count: math.MaxUint64},
		{Rule: strings.Repeat("r", codec.MaxRuleNameLen), Key: "x", Window: math.MinInt64 + 1, Count: 0},
		{Rule: "neg", Key: "y", Window: -5, Count: 1},
	}}
	_, err := wire.Encode(d, 0)
	require.Error(t, err, "a window spread over the int64 range cannot be encoded")
	d.Entries[1].Window = math.MaxInt64 - 2
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	got, err := wire.Decode(msgs[0])
	require.NoError(t, err)
	sameEntries(t, d.Entries, got.Entries)
}

func TestEncodeSplitsUnderMaxBytes(t *testing.T) {
	rng := seeded(t, 4)
	d := sampleDelta(rng, 5000)
	msgs, err := wire.Encode(d, 8<<10)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 5)
	var all []crdt.Entry
	dec := wire.NewDecoder()
	for _, m := range msgs {
		assert.LessOrEqual(t, len(m), 8<<10)
		var out wire.Delta
		require.NoError(t, dec.Decode(m, &out))
		assert.Equal(t, d.Sender, out.Sender)
		assert.Equal(t, d.Epoch, out.Epoch)
		all = append(all, out.Entries...)
	}
	sameEntries(t, d.Entries, all)
}

func TestEncodeRejectsBadInput(t *testing.T) {
	good := identity.Replica{PoPID: identity.PoPID{Region: "r", PoP: "p"}, Node: "n"}
	tests := []struct {
		name string
		d    wire.Delta
	}{
		{"bad sender", wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "r/x", PoP: "p"}, Node: "n"}}},
		{"empty key", wire.Delta{Sender: good, Entries: []crdt.Entry{{Rule: "a", Key: ""}}}},
		{"long key", wire.Delta{Sender: good, Entries: []crdt.Entry{{Rule: "a", Key: strings.Repeat("k", codec.MaxKeyLen+1)}}}},
		{"long rule", wire.Delta{Sender: good, Entries: []crdt.Entry{{Rule: strings.Repeat("r", codec.MaxRuleNameLen+1), Key: "k"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := wire.Encode(&tt.d, 0)
			assert.Error(t, err)
		})
	}
}

func mp(t *testing.T, v ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	for _, x := range v {
		require.NoError(t, enc.Encode(x))
	}
	return buf.Bytes()
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeHostile(t *testing.T) {
	sender := []any{"eu", "ams", "n1", 1}
	valid := mp(t, []any{2, sender, 5, 9, []any{[]any{"api", 100, []any{"k", 0, 3}}}})
	_, err := wire.Decode(valid)
	require.NoError(t, err, "the baseline message must be valid")
	validV1 := mp(t, []any{1, sender, 5, []any{[]any{"api", 100, []any{"k", 0, 3}}}})
	_, err = wire.Decode(validV1)
	require.NoError(t, err, "the version 1 baseline message must be valid")
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, wire.ErrDeltaMalformed},
		{"truncated", valid[:len(valid)-1], wire.ErrDeltaMalformed},
		{"truncated v1", validV1[:len(validV1)-1], wire.ErrDeltaMalformed},
		{"trailing bytes", append(append([]byte(nil), valid...), 0xc0), wire.ErrDeltaMalformed},
		{"trailing bytes v1", append(append([]byte(nil), validV1...), 0xc0), wire.ErrDeltaMalformed},
		{"not an array", mp(t, "hello"), wire.ErrDeltaMalformed},
		{"wrong version", mp(t, []any{8, sender, 5, 9, []any{}}), wire.ErrDeltaVersion},
		{"version 2 in a version 1 array", mp(t, []any{2, sender, 5, []any{}}), wire.ErrDeltaMalformed},
		{"version as string", mp(t, []any{"2", sender, 5, 9, []any{}}), wire.ErrDeltaMalformed},
		{"huge array32 prefix", unhex("dd ffffffff"), wire.ErrDeltaMalformed},
		{"huge groups prefix", unhex("95 02 94 a26575 a3616d73 a26e31 01 05 09 dd ffffffff"), wire.ErrDeltaMalformed},
		{"huge groups prefix v1", unhex("94 01 94 a26575 a3616d73 a26e31 01 05 dd ffffffff"), wire.ErrDeltaMalformed},
		{"huge str32 key", unhex("95 02 94 a26575 a3616d73 a26e31 01 05 09 91 93 a3617069 64 dd 00000003 db ffffffff"), wire.ErrDeltaMalformed},
		{"huge str32 key v1", unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 dd 00000003 db ffffffff"), wire.ErrDeltaMalformed},
		{"huge bin32 key", unhex("95 02 94 a26575 a3616d73 a26e31 01 05 09 91 93 a3617069 64 93 c6 ffffffff"), wire.ErrDeltaMalformed},
		{"huge bin32 key v1", unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 93 c6 ffffffff"), wire.ErrDeltaMalformed},
		{"entries not multiple of 3", mp(t, []any{2, sender, 5, 9, []any{[]any{"api", 100, []any{"k", 0}}}}), wire.ErrDeltaMalformed},
		{"empty key", mp(t, []any{2, sender, 5, 9, []any{[]any{"api", 100, []any{"", 0, 1}}}}), wire.ErrDeltaMalformed},
		{"key too long", mp(t, []any{2, sender, 5, 9, []any{[]any{"api", 100, []any{strings.Repeat("k", codec.MaxKeyLen+1), 0, 1}}}}), wire.ErrDeltaMalformed},
		{"empty rule", mp(t, []any{2, sender, 5, 9, []any{[]any{"", 100, []any{"k", 0, 1}}}}), wire.ErrDeltaMalformed},
		{"bad sender name", mp(t, []any{2, []any{"e/u", "ams", "n1", 1}, 5, 9, []any{}}), wire.ErrDeltaMalformed},
		{"sender too short", mp(t, []any{2, []any{"eu", "ams"}, 5, 9, []any{}}), wire.ErrDeltaMalformed},
		{"negative count", mp(t, []any{2, sender, 5, 9, []any{[]any{"api", 100, []any{"k", 0, -1}}}}), wire.ErrDeltaMalformed},
		{"negative epoch", mp(t, []any{2, sender, 5, -9, []any{}}), wire.ErrDeltaMalformed},
		{"window overflow", mp(t, []any{2, sender, 5, 9, []any{[]any{"api", int64(math.MaxInt64), []any{"k", 1, 1}}}}), wire.ErrDeltaMalformed},
		{"window overflow v1", mp(t, []any{1, sender, 5, []any{[]any{"api", int64(math.MaxInt64), []any{"k", 1, 1}}}}), wire.ErrDeltaMalformed},
		{"map instead of array", mp(t, map[string]any{"v": 1}), wire.ErrDeltaMalformed},
		{"oversized message", make([]byte, wire.MaxDeltaBytes+1), wire.ErrDeltaTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out wire.Delta
			err := wire.NewDecoder().Decode(tt.in, &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tt.want), "got %v, want %v", err, tt.want)
			assert.Empty(t, out.Entries, "nothing is returned from a bad message")
		})
	}
}

// FuzzDecode: no input panics, and whatever decodes re-encodes to an
// equivalent delta.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	// Every kept encoding, of every version, seeds the corpus.
	golden, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.msgpack"))
	for _, g := range golden {
		b, err := os.ReadFile(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, n := range []int{0, 1, 5} {
		msgs, err := wire.Encode(sampleDelta(rng, n), 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msgs[0])
	}
	for _, n := range []int{1, 4} {
		d := sampleDelta(rng, n)
		blocks.Section.Set(d, sampleBlocks(rng, n))
		msgs, err := wire.Encode(d, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msgs[len(msgs)-1])
	}
	for _, n := range []int{1, 3} {
		d := sampleDelta(rng, 0)
		memos.Section.Set(d, sampleMemos(rng, n))
		msgs, err := wire.Encode(d, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msgs[len(msgs)-1])
	}
	for _, n := range []int{1, 3} {
		d := sampleDelta(rng, 0)
		modes.Section.Set(d, sampleModes(rng, n))
		msgs, err := wire.Encode(d, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msgs[len(msgs)-1])
	}
	for _, n := range []int{1, 3} {
		d := sampleDelta(rng, 0)
		inflight.Section.Set(d, sampleInflight(rng, n))
		msgs, err := wire.Encode(d, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msgs[len(msgs)-1])
	}
	// Version 1, without an epoch, still decodes.
	f.Add(unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 93 a16b 00 03"))
	f.Add(unhex("dd ffffffff"))
	f.Add(unhex("95 02 94 a26575 a3616d73 a26e31 01 05 09 91 93 a3617069 64 93 c6 ffffffff"))
	f.Add(unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 93 c6 ffffffff"))
	dec := wire.NewDecoder()
	f.Fuzz(func(t *testing.T, b []byte) {
		var d wire.Delta
		if err := dec.Decode(b, &d); err != nil {
			return
		}
		if err := d.Sender.Validate(); err != nil {
			t.Fatalf("decoded an invalid sender: %v", err)
		}
		sender, sentAt, epoch := d.Sender, d.SentAt, d.Epoch
		for _, e := range d.Entries {
			if len(e.Key) == 0 || len(e.Key) > codec.MaxKeyLen || len(e.Rule) == 0 || len(e.Rule) > codec.MaxRuleNameLen {
				t.Fatalf("decoded an entry outside the caps: %+v", e)
			}
		}
		for _, m := range memos.Section.Items(&d) {
			if len(m.Rule) == 0 || len(m.Rule) > codec.MaxRuleNameLen || m.Verdict&^(memos.Allowed|memos.ShadowDenied) != 0 {
				t.Fatalf("decoded a memo outside the caps: %+v", m)
			}
		}
		for _, m := range modes.Section.Items(&d) {
			if len(m.Rule) == 0 || len(m.Rule) > codec.MaxRuleNameLen || m.Mode > modes.Off || m.By.Validate() != nil {
				t.Fatalf("decoded a mode outside the caps: %+v", m)
			}
		}
		for _, e := range inflight.Section.Items(&d) {
			if len(e.Key) == 0 || len(e.Key) > codec.MaxKeyLen || len(e.Rule) == 0 || len(e.Rule) > codec.MaxRuleNameLen {
				t.Fatalf("decoded an in-flight count outside the caps: %+v", e)
			}
		}
		if n := len(d.Entries) + blocks.Section.Len(&d) + memos.Section.Len(&d) + modes.Section.Len(&d) + inflight.Section.Len(&d); n > 4*codec.MaxItems+modes.MaxPerSection || n > len(b) {
			t.Fatalf("decoded %d items from %d bytes", n, len(b))
		}
		msgs, err := wire.Encode(&d, 0)
		if err != nil {
			return // e.g. a window spread too wide to re-encode
		}
		var back wire.Delta
		for _, m := range msgs {
			var part wire.Delta
			if err := wire.NewDecoder().Decode(m, &part); err != nil {
				t.Fatalf("re-encoded delta does not decode: %v", err)
			}
			if part.Sender != sender || part.SentAt != sentAt || part.Epoch != epoch {
				t.Fatalf("re-encoded header %v %d %d, want %v %d %d", part.Sender, part.SentAt, part.Epoch, sender, sentAt, epoch)
			}
			back.Entries = append(back.Entries, part.Entries...)
			blocks.Section.Append(&back, blocks.Section.Items(&part)...)
			memos.Section.Append(&back, memos.Section.Items(&part)...)
			modes.Section.Append(&back, modes.Section.Items(&part)...)
			inflight.Section.Append(&back, inflight.Section.Items(&part)...)
		}
		sameEntries(t, d.Entries, back.Entries)
		sameBlocks(t, blocks.Section.Items(&d), blocks.Section.Items(&back))
		sameMemos(t, memos.Section.Items(&d), memos.Section.Items(&back))
		sameMultiset(t, modes.Section.Items(&d), modes.Section.Items(&back))
		sameMultiset(t, inflight.Section.Items(&d), inflight.Section.Items(&back))
	})
}

// TestFuzzCorpusCommitted makes sure the seed corpus in testdata is present
// and still means what its names say: the valid seeds of both versions decode
// (version 1 with epoch 0), every other seed is refused.
func TestFuzzCorpusCommitted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	versions := map[string]int{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			lit, ok := strings.CutPrefix(strings.TrimSpace(string(raw)), "go test fuzz v1\n[]byte(")
			require.True(t, ok, "corpus header")
			lit, ok = strings.CutSuffix(lit, ")")
			require.True(t, ok)
			b, err := strconv.Unquote(lit)
			require.NoError(t, err)
			d, err := wire.Decode([]byte(b))
			name := filepath.Base(f)
			if !strings.Contains(name, "valid-") {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			switch {
			case strings.HasPrefix(name, "v6-"):
				versions["v6"]++
				assert.NotEmpty(t, inflight.Section.Items(d))
			case strings.HasPrefix(name, "v5-"):
				versions["v5"]++
				assert.NotEmpty(t, modes.Section.Items(d))
			case strings.HasPrefix(name, "v4-"):
				versions["v4"]++
				assert.NotEmpty(t, memos.Section.Items(d))
			case strings.HasPrefix(name, "v3-"):
				versions["v3"]++
				assert.NotEmpty(t, blocks.Section.Items(d))
			case strings.HasPrefix(name, "v2-"):
				versions["v2"]++
			default:
				versions["v1"]++
				assert.Zero(t, d.Epoch)
			}
		})
	}
	assert.NotZero(t, versions["v1"], "version 1 seeds")
	assert.NotZero(t, versions["v2"], "version 2 seeds")
	assert.NotZero(t, versions["v3"], "version 3 seeds")
	assert.NotZero(t, versions["v4"], "version 4 seeds")
	assert.NotZero(t, versions["v5"], "version 5 seeds")
	assert.NotZero(t, versions["v6"], "version 6 seeds")
}

// BenchmarkEncodeDelta encodes a batch of 100 IPv4 entries.
func BenchmarkEncodeDelta(b *testing.B) {
	d := sampleDelta(rand.New(rand.NewPCG(1, 2)), 100)
	b.ReportAllocs()
	var size int
	for i := 0; i < b.N; i++ {
		msgs, err := wire.Encode(d, 0)
		if err != nil {
			b.Fatal(err)
		}
		size = len(msgs[0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/entry")
	b.ReportMetric(float64(size)/100, "bytes/entry")
}

// BenchmarkDecodeDelta decodes a batch of 100 IPv4 entries.
func BenchmarkDecodeDelta(b *testing.B) {
	d := sampleDelta(rand.New(rand.NewPCG(1, 2)), 100)
	msgs, err := wire.Encode(d, 0)
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, msgs[0])
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/entry")
	b.ReportMetric(float64(len(msgs[0]))/100, "bytes/entry")
}

// benchDecode decodes msg b.N times into one reused delta.
func benchDecode(b *testing.B, msg []byte) {
	dec := wire.NewDecoder()
	var out wire.Delta
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := dec.Decode(msg, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeConcurrentReusesNothingShared: encoders are pooled, so
// concurrent wire.Encode calls of deltas large and small must each get exactly
// their own delta back.
func TestEncodeConcurrentReusesNothingShared(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for i := range 60 {
				d := sampleDelta(rng, 1+rng.IntN(3000))
				d.SentAt = int64(g*1000 + i)
				msgs, err := wire.Encode(d, 0)
				if err != nil {
					t.Error(err)
					return
				}
				var got []crdt.Entry
				for _, m := range msgs {
					p, err := wire.Decode(m)
					if err != nil {
						t.Error(err)
						return
					}
					if p.SentAt != d.SentAt || p.Sender != d.Sender {
						t.Errorf("goroutine %d delta %d: header of another delta", g, i)
						return
					}
					got = append(got, p.Entries...)
				}
				if len(got) != len(d.Entries) {
					t.Errorf("goroutine %d delta %d: %d entries back, want %d", g, i, len(got), len(d.Entries))
					return
				}
			}
		}()
	}
	wg.Wait()
}
