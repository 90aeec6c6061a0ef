package crdt

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
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func sampleDelta(rng *rand.Rand, n int) *Delta {
	d := &Delta{Sender: Replica{Region: "eu", PoP: "ams", Node: "ams-1", Incarnation: rng.Uint64()}, SentAt: rng.Int64()}
	rules := []string{"per-ip", "api", "login"}
	for i := 0; i < n; i++ {
		d.Entries = append(d.Entries, Entry{
			Rule:   rules[rng.IntN(len(rules))],
			Key:    strconv.Itoa(rng.IntN(256)) + "." + strconv.Itoa(rng.IntN(256)) + ".0.1",
			Window: 29_000_000 + int64(rng.IntN(3)),
			Count:  uint64(rng.IntN(1000)),
		})
	}
	return d
}

// sameEntries compares entries ignoring order (Encode groups by rule).
func sameEntries(t *testing.T, want, got []Entry) {
	t.Helper()
	count := map[Entry]int{}
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
		msgs, err := Encode(d, 0)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		got, err := Decode(msgs[0])
		require.NoError(t, err)
		assert.Equal(t, d.Sender, got.Sender)
		assert.Equal(t, d.SentAt, got.SentAt)
		sameEntries(t, d.Entries, got.Entries)
	}
}

func TestDeltaEdgeValues(t *testing.T) {
	d := &Delta{Sender: Replica{Region: "r", PoP: "p", Node: "n", Incarnation: math.MaxUint64}, SentAt: math.MinInt64, Entries: []Entry{
		{Rule: strings.Repeat("r", MaxRuleNameLen), Key: strings.Repeat("k", MaxKeyLen), Window: math.MaxInt64, Count: math.MaxUint64},
		{Rule: strings.Repeat("r", MaxRuleNameLen), Key: "x", Window: math.MinInt64 + 1, Count: 0},
		{Rule: "neg", Key: "y", Window: -5, Count: 1},
	}}
	_, err := Encode(d, 0)
	require.Error(t, err, "a window spread over the int64 range cannot be encoded")
	d.Entries[1].Window = math.MaxInt64 - 2
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	got, err := Decode(msgs[0])
	require.NoError(t, err)
	sameEntries(t, d.Entries, got.Entries)
}

func TestEncodeSplitsUnderMaxBytes(t *testing.T) {
	rng := seeded(t, 4)
	d := sampleDelta(rng, 5000)
	msgs, err := Encode(d, 8<<10)
	require.NoError(t, err)
	require.Greater(t, len(msgs), 5)
	var all []Entry
	dec := NewDecoder()
	for _, m := range msgs {
		assert.LessOrEqual(t, len(m), 8<<10)
		var out Delta
		require.NoError(t, dec.Decode(m, &out))
		assert.Equal(t, d.Sender, out.Sender)
		all = append(all, out.Entries...)
	}
	sameEntries(t, d.Entries, all)
}

func TestEncodeRejectsBadInput(t *testing.T) {
	good := Replica{Region: "r", PoP: "p", Node: "n"}
	tests := []struct {
		name string
		d    Delta
	}{
		{"bad sender", Delta{Sender: Replica{Region: "r/x", PoP: "p", Node: "n"}}},
		{"empty key", Delta{Sender: good, Entries: []Entry{{Rule: "a", Key: ""}}}},
		{"long key", Delta{Sender: good, Entries: []Entry{{Rule: "a", Key: strings.Repeat("k", MaxKeyLen+1)}}}},
		{"long rule", Delta{Sender: good, Entries: []Entry{{Rule: strings.Repeat("r", MaxRuleNameLen+1), Key: "k"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Encode(&tt.d, 0)
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
	valid := mp(t, []any{1, sender, 5, []any{[]any{"api", 100, []any{"k", 0, 3}}}})
	_, err := Decode(valid)
	require.NoError(t, err, "the baseline message must be valid")
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrDeltaMalformed},
		{"truncated", valid[:len(valid)-1], ErrDeltaMalformed},
		{"trailing bytes", append(append([]byte(nil), valid...), 0xc0), ErrDeltaMalformed},
		{"not an array", mp(t, "hello"), ErrDeltaMalformed},
		{"wrong version", mp(t, []any{2, sender, 5, []any{}}), ErrDeltaVersion},
		{"version as string", mp(t, []any{"1", sender, 5, []any{}}), ErrDeltaMalformed},
		{"huge array32 prefix", unhex("dd ffffffff"), ErrDeltaMalformed},
		{"huge groups prefix", append(mp(t, 1, sender, 5)[0:0], unhex("94 01 94 a2657561 63616d73 a26e31 01 05 dd ffffffff")...), ErrDeltaMalformed},
		{"huge str32 key", unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 dd 00000003 db ffffffff"), ErrDeltaMalformed},
		{"huge bin32 key", unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 93 c6 ffffffff"), ErrDeltaMalformed},
		{"entries not multiple of 3", mp(t, []any{1, sender, 5, []any{[]any{"api", 100, []any{"k", 0}}}}), ErrDeltaMalformed},
		{"empty key", mp(t, []any{1, sender, 5, []any{[]any{"api", 100, []any{"", 0, 1}}}}), ErrDeltaMalformed},
		{"key too long", mp(t, []any{1, sender, 5, []any{[]any{"api", 100, []any{strings.Repeat("k", MaxKeyLen+1), 0, 1}}}}), ErrDeltaMalformed},
		{"empty rule", mp(t, []any{1, sender, 5, []any{[]any{"", 100, []any{"k", 0, 1}}}}), ErrDeltaMalformed},
		{"bad sender name", mp(t, []any{1, []any{"e/u", "ams", "n1", 1}, 5, []any{}}), ErrDeltaMalformed},
		{"sender too short", mp(t, []any{1, []any{"eu", "ams"}, 5, []any{}}), ErrDeltaMalformed},
		{"negative count", mp(t, []any{1, sender, 5, []any{[]any{"api", 100, []any{"k", 0, -1}}}}), ErrDeltaMalformed},
		{"window overflow", mp(t, []any{1, sender, 5, []any{[]any{"api", int64(math.MaxInt64), []any{"k", 1, 1}}}}), ErrDeltaMalformed},
		{"map instead of array", mp(t, map[string]any{"v": 1}), ErrDeltaMalformed},
		{"oversized message", make([]byte, MaxDeltaBytes+1), ErrDeltaTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out Delta
			err := NewDecoder().Decode(tt.in, &out)
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
	for _, n := range []int{0, 1, 5} {
		msgs, err := Encode(sampleDelta(rng, n), 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msgs[0])
	}
	f.Add(unhex("dd ffffffff"))
	f.Add(unhex("94 01 94 a26575 a3616d73 a26e31 01 05 91 93 a3617069 64 93 c6 ffffffff"))
	dec := NewDecoder()
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Delta
		if err := dec.Decode(b, &d); err != nil {
			return
		}
		if err := d.Sender.Validate(); err != nil {
			t.Fatalf("decoded an invalid sender: %v", err)
		}
		for _, e := range d.Entries {
			if len(e.Key) == 0 || len(e.Key) > MaxKeyLen || len(e.Rule) == 0 || len(e.Rule) > MaxRuleNameLen {
				t.Fatalf("decoded an entry outside the caps: %+v", e)
			}
		}
		msgs, err := Encode(&d, 0)
		if err != nil {
			return // e.g. a window spread too wide to re-encode
		}
		var back Delta
		for _, m := range msgs {
			var part Delta
			if err := NewDecoder().Decode(m, &part); err != nil {
				t.Fatalf("re-encoded delta does not decode: %v", err)
			}
			back.Entries = append(back.Entries, part.Entries...)
		}
		sameEntries(t, d.Entries, back.Entries)
	})
}

// TestFuzzCorpusCommitted makes sure the seed corpus in testdata is present.
func TestFuzzCorpusCommitted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		_, err := os.ReadFile(f)
		require.NoError(t, err)
	}
}

// BenchmarkEncodeDelta encodes a batch of 100 IPv4 entries.
func BenchmarkEncodeDelta(b *testing.B) {
	d := sampleDelta(rand.New(rand.NewPCG(1, 2)), 100)
	b.ReportAllocs()
	var size int
	for i := 0; i < b.N; i++ {
		msgs, err := Encode(d, 0)
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
	msgs, err := Encode(d, 0)
	if err != nil {
		b.Fatal(err)
	}
	dec := NewDecoder()
	var out Delta
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := dec.Decode(msgs[0], &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/entry")
	b.ReportMetric(float64(len(msgs[0]))/100, "bytes/entry")
}
