package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/geolimit/geolimit/wire"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/replicated/inflight"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// sectionKinds returns the kinds of an envelope's sections, in order.
func sectionKinds(t *testing.T, msg []byte) []wire.SectionKind {
	t.Helper()
	var env []any
	dec := msgpack.NewDecoder(bytes.NewReader(msg))
	dec.UseLooseInterfaceDecoding(true)
	require.NoError(t, dec.Decode(&env))
	require.Len(t, env, 5)
	require.EqualValues(t, wire.EnvelopeVersion, env[0])
	secs := env[4].([]any)
	require.Zero(t, len(secs)%2)
	var out []wire.SectionKind
	for i := 0; i < len(secs); i += 2 {
		k, ok := secs[i].(uint64)
		if !ok {
			k = uint64(secs[i].(int64))
		}
		out = append(out, wire.SectionKind(k))
	}
	return out
}

// envelope builds an envelope by hand: sections are (kind, body) pairs,
// each body one msgpack value (or raw bytes as a []byte).
func envelope(t *testing.T, sections ...any) []byte {
	t.Helper()
	var secs []any
	for i := 0; i < len(sections); i += 2 {
		body, ok := sections[i+1].([]byte)
		if !ok {
			body = mp(t, sections[i+1])
		}
		secs = append(secs, sections[i], body)
	}
	return mp(t, []any{wire.EnvelopeVersion, []any{"eu", "ams", "n1", 1}, 5, 9, secs})
}

var updateGolden = flag.Bool("update-golden", false, "write testdata/golden/v7-*.msgpack from the current encoder")

// golden is a delta as its testdata/golden/*.json file spells it: every
// section's items by name.
type golden struct {
	Sender   identity.Replica
	SentAt   int64
	Epoch    uint64
	Entries  []crdt.Entry
	Blocks   []blocks.Block
	Memos    []memos.Memo
	Modes    []modes.RuleMode
	Inflight []inflight.Count
}

func (g *golden) delta() *wire.Delta {
	d := &wire.Delta{Sender: g.Sender, SentAt: g.SentAt, Epoch: g.Epoch, Entries: g.Entries}
	blocks.Section.Set(d, g.Blocks)
	memos.Section.Set(d, g.Memos)
	modes.Section.Set(d, g.Modes)
	inflight.Section.Set(d, g.Inflight)
	return d
}

// goldenDeltas are the deltas whose current encodings are kept in
// testdata/golden as v7-NAME.msgpack.
func goldenDeltas() map[string]*golden {
	node := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1732000000000000007}
	var id memos.ID
	for i := range id {
		id[i] = byte(i * 7)
	}
	return map[string]*golden{
		"all-sections": {Sender: node, SentAt: 1764300000000000000, Epoch: 41,
			Entries:  []crdt.Entry{{Rule: "api", Key: "203.0.113.7", Window: 29405000, Count: 3}, {Rule: "login", Key: "user:42", Window: 2940500, Count: 1}},
			Blocks:   []blocks.Block{{Rule: "login", Key: "user:42", Until: 1764300060000000000}},
			Memos:    []memos.Memo{{Rule: "charge", ID: id, Until: 1764300600000000000, Verdict: memos.Allowed}},
			Modes:    []modes.RuleMode{{Rule: "api", Mode: modes.Shadow, At: 1764299999000000000, By: node}},
			Inflight: []inflight.Count{{Rule: "uploads", Key: "tenant-9", Count: 2, Version: 17}},
		},
		"pop-totals": {Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 41), SentAt: 1764300000000000000, Epoch: 41,
			Entries: []crdt.Entry{{Rule: "api", Key: "203.0.113.7", Window: 29405000, Count: 97}}},
		"heartbeat": {Sender: node, SentAt: 1764300000000000000, Epoch: 41},
	}
}

// TestGoldenMessages: every encoding kept in testdata/golden, of this
// version and of every earlier one, still decodes to what its .json file
// says. A new version adds files; none is ever changed or removed.
func TestGoldenMessages(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	if *updateGolden {
		for name, d := range goldenDeltas() {
			msgs, err := wire.Encode(d.delta(), 0)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			base := filepath.Join(dir, "v7-"+name)
			require.NoError(t, os.WriteFile(base+".msgpack", msgs[0], 0o644))
			js, err := json.MarshalIndent(d, "", "  ")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(base+".json", append(js, '\n'), 0o644))
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.msgpack"))
	require.NoError(t, err)
	versions := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".msgpack")
		versions[strings.SplitN(name, "-", 2)[0]] = true
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			js, err := os.ReadFile(strings.TrimSuffix(f, ".msgpack") + ".json")
			require.NoError(t, err)
			var want golden
			require.NoError(t, json.Unmarshal(js, &want))
			got, err := wire.Decode(b)
			require.NoError(t, err)
			assert.Equal(t, want.Sender, got.Sender)
			assert.Equal(t, want.SentAt, got.SentAt)
			assert.Equal(t, want.Epoch, got.Epoch)
			sameEntries(t, want.Entries, got.Entries)
			assert.ElementsMatch(t, want.Blocks, blocks.Section.Items(got))
			assert.ElementsMatch(t, want.Memos, memos.Section.Items(got))
			assert.ElementsMatch(t, want.Modes, modes.Section.Items(got))
			assert.ElementsMatch(t, want.Inflight, inflight.Section.Items(got))
			assert.Zero(t, got.Skipped)
		})
	}
	for v := 1; v <= wire.EnvelopeVersion; v++ {
		assert.True(t, versions["v"+string(rune('0'+v))], "no golden message of version %d", v)
	}
	// The current encoder still writes exactly the kept version 7 bytes.
	for name, d := range goldenDeltas() {
		want, err := os.ReadFile(filepath.Join(dir, "v7-"+name+".msgpack"))
		require.NoError(t, err)
		msgs, err := wire.Encode(d.delta(), 0)
		require.NoError(t, err)
		assert.Equal(t, [][]byte{want}, msgs, "v7-%s: the encoding changed; a new shape is a new version or a new section kind", name)
	}
}

// TestUnknownSectionsSkipped: a newer peer's message with a section kind
// this version does not know decodes: the unknown section is skipped whole
// and counted, and every known section before and after it is read.
func TestUnknownSectionsSkipped(t *testing.T) {
	counts := []any{[]any{"api", 100, []any{"k", 0, 3}}}
	blockGroups := []any{[]any{"login", []any{"u", 77}}}
	// The unknown body is anything of any shape, even bytes that are no
	// msgpack at all: the receiver never looks inside.
	for name, unknown := range map[string]any{
		"a map":       map[string]any{"hlc": 12, "by": "x"},
		"nested":      []any{[]any{[]any{1, 2}, "x"}, 3},
		"not msgpack": []byte{0xc1, 0xc1, 0xff},
		"empty":       []byte{},
		"large kind":  []any{1},
	} {
		t.Run(name, func(t *testing.T) {
			kind := 99
			if name == "large kind" {
				kind = 1 << 40
			}
			out, err := wire.Decode(envelope(t, wire.SectionCounts, counts, kind, unknown, blocks.Section.Kind(), blockGroups))
			require.NoError(t, err)
			assert.Equal(t, 1, out.Skipped)
			assert.Equal(t, []crdt.Entry{{Rule: "api", Key: "k", Window: 100, Count: 3}}, out.Entries)
			assert.Equal(t, []blocks.Block{{Rule: "login", Key: "u", Until: 77}}, blocks.Section.Items(out))
		})
	}
	t.Run("reused decoder forgets", func(t *testing.T) {
		dec := wire.NewDecoder()
		var out wire.Delta
		require.NoError(t, dec.Decode(envelope(t, 99, []any{1}, 100, []any{2}), &out))
		assert.Equal(t, 2, out.Skipped)
		require.NoError(t, dec.Decode(envelope(t, wire.SectionCounts, counts), &out))
		assert.Zero(t, out.Skipped)
	})
}

func TestDecodeHostileEnvelopes(t *testing.T) {
	counts := []any{[]any{"api", 100, []any{"k", 0, 3}}}
	good := envelope(t, wire.SectionCounts, counts)
	_, err := wire.Decode(good)
	require.NoError(t, err)
	sender := []any{"eu", "ams", "n1", 1}
	body := mp(t, counts)
	tooMany := make([]any, 0, 2*(wire.MaxSections+1))
	for range wire.MaxSections + 1 {
		tooMany = append(tooMany, 99, []byte{})
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"truncated", good[:len(good)-1]},
		{"odd sections array", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{1}})},
		{"body not a binary", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{1, counts}})},
		{"body a string", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{1, string(body)}})},
		{"body too short", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{1, body[:len(body)-1]}})},
		{"body with trailing bytes", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{1, append(append([]byte(nil), body...), 0xc0)}})},
		{"two values in a body", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{1, append(append([]byte(nil), body...), body...)}})},
		{"negative kind", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{-1, body}})},
		{"too many sections", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, tooMany})},
		{"extra field", mp(t, []any{wire.EnvelopeVersion, sender, 5, 9, []any{}, 1})},
		{"bad counts body", envelope(t, wire.SectionCounts, []any{[]any{"api", 100, []any{"k", 0}}})},
	}
	// A body whose bin32 length claims more than the message holds.
	huge := append([]byte(nil), good...)
	at := bytes.Index(huge, []byte{0xc4})
	require.Positive(t, at)
	huge[at+1] = 0xff
	huge32 := append(mp(t, []any{wire.EnvelopeVersion, sender, 5, 9})[:0:0], mp(t, []any{wire.EnvelopeVersion, sender, 5, 9})...)
	huge32[0] = 0x95 // five elements: the sections array follows
	huge32 = append(huge32, 0x92, 0x01, 0xc6)
	huge32 = binary.BigEndian.AppendUint32(huge32, 0x7fffffff)
	tests = append(tests, struct {
		name string
		in   []byte
	}{"huge body length", huge}, struct {
		name string
		in   []byte
	}{"huge bin32 body length", huge32})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out wire.Delta
			err := wire.NewDecoder().Decode(tt.in, &out)
			require.Error(t, err)
			assert.True(t, errors.Is(err, wire.ErrDeltaMalformed), "%v", err)
			assert.Empty(t, out.Entries)
			assert.Zero(t, out.Skipped)
		})
	}
}

// TestEnvelopePacksSections: what fits goes in one message, in the fixed
// order of kinds, and a split keeps every message under maxBytes.
func TestEnvelopePacksSections(t *testing.T) {
	d := goldenDeltas()["all-sections"].delta()
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []wire.SectionKind{wire.SectionCounts, blocks.Section.Kind(), memos.Section.Kind(), modes.Section.Kind(), inflight.Section.Kind()}, sectionKinds(t, msgs[0]))
	hb, err := wire.Encode(goldenDeltas()["heartbeat"].delta(), 0)
	require.NoError(t, err)
	require.Len(t, hb, 1)
	assert.Empty(t, sectionKinds(t, hb[0]))
}

// BenchmarkDecodeAllSections decodes the golden message that carries a
// section of every kind, into a reused delta.
func BenchmarkDecodeAllSections(b *testing.B) {
	msg, err := os.ReadFile(filepath.Join("testdata", "golden", "v7-all-sections.msgpack"))
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, msg)
}
