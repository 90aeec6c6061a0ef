package statefile

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

var self = identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 7}

func sample() *State {
	return &State{Self: self, SavedAt: 1234567890, Deltas: []wire.Delta{
		{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 7), SentAt: 1, Epoch: 7, Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: 100, Count: 9}}},
		{Sender: self, SentAt: 1, Epoch: 7, Entries: []crdt.Entry{{Rule: "local", Key: "203.0.113.7", Window: 5, Count: 3}, {Rule: "ip", Key: "x", Window: 6, Count: 1}}},
	}}
}

// write writes st to path.
func write(path string, st *State) error {
	return Write(path, Header{Self: st.Self, SavedAt: st.SavedAt}, FromSlice(st.Deltas))
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	require.NoError(t, write(path, sample()))
	got, err := Read(path)
	require.NoError(t, err)
	assert.Equal(t, sample(), got)
	// An empty state is a valid file too.
	require.NoError(t, write(path, &State{Self: self}))
	got, err = Read(path)
	require.NoError(t, err)
	assert.Empty(t, got.Deltas)
	// No temporary file is left behind.
	ents, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, ents, 1)
}

func TestReadMissing(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "none"))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
}

// Every damaged file is refused whole with an error, never a panic.
func TestDecodeRefusesDamage(t *testing.T) {
	good, err := Encode(sample())
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"not a state file", []byte("rules:\n  - {name: a}\n"), ErrCorrupt},
		{"truncated by one byte", good[:len(good)-1], ErrCorrupt},
		{"truncated to half", good[:len(good)/2], ErrCorrupt},
		{"header only", good[:headerLen], ErrCorrupt},
		{"flipped bit", func() []byte { b := append([]byte(nil), good...); b[len(b)/2] ^= 1; return b }(), ErrCorrupt},
		{"other version", func() []byte { b := append([]byte(nil), good...); b[len(magic)] = 9; return b }(), ErrVersion},
		{"trailing garbage", append(append([]byte(nil), good...), 0), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Decode(tc.b)
			assert.Nil(t, st)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

// Write never leaves a half-written file at path: a failed write keeps the
// former file.
func TestWriteKeepsFormerFileOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	require.NoError(t, write(path, sample()))
	bad := &State{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu"}}}
	require.Error(t, write(path, bad))
	_, err := Read(path)
	require.NoError(t, err)
	require.Error(t, write(filepath.Join(t.TempDir(), "no", "such", "dir"), sample()))
}

func FuzzDecode(f *testing.F) {
	good, err := Encode(sample())
	require.NoError(f, err)
	f.Add(good)
	f.Add(good[:len(good)-3])
	empty, err := Encode(&State{Self: self})
	require.NoError(f, err)
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Decode(b)
		if err != nil {
			if st != nil {
				t.Fatal("state returned with an error")
			}
			return
		}
		// What decodes re-encodes to a file that decodes alike.
		again, err := Encode(st)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// withCRC returns body followed by its checksum: a file whose damage the
// checksum does not catch.
func withCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, crcTable))
}

// Open checks every delta before Deltas hands out any: a file whose
// checksum holds but whose last delta is damaged, or whose framing names a
// delta larger than any Write writes, is refused whole.
func TestOpenChecksEveryDeltaFirst(t *testing.T) {
	good, err := Encode(sample())
	require.NoError(t, err)
	body := good[:len(good)-4]
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"damaged last delta": withCRC(append(append([]byte(nil), body...), 3, 0x91, 0x05, 0xc1)),
		"huge frame":         withCRC(binary.AppendUvarint(append([]byte(nil), body...), 1<<40)),
		"short frame":        withCRC(binary.AppendUvarint(append([]byte(nil), body...), 100)),
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		f, err := Open(path)
		assert.Nil(t, f, name)
		assert.ErrorIs(t, err, ErrCorrupt, name)
	}
}

// Deltas hands out the deltas in order, stops at fn's first error and
// returns it; Write stops taking deltas at its first error.
func TestStreaming(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	require.NoError(t, write(path, sample()))
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, Header{Self: self, SavedAt: 1234567890}, f.Header)
	var senders []identity.Replica
	require.NoError(t, f.Deltas(func(d *wire.Delta) error {
		senders = append(senders, d.Sender)
		return nil
	}))
	assert.Equal(t, []identity.Replica{sample().Deltas[0].Sender, sample().Deltas[1].Sender}, senders)
	stop := errors.New("stop")
	calls := 0
	assert.Equal(t, stop, f.Deltas(func(*wire.Delta) error { calls++; return stop }))
	assert.Equal(t, 1, calls)

	taken := 0
	bad := func(yield func(*wire.Delta) bool) {
		for _, d := range []wire.Delta{{Sender: identity.Replica{PoPID: identity.PoPID{Region: "no"}}}, sample().Deltas[0]} {
			taken++
			if !yield(&d) {
				return
			}
		}
	}
	require.Error(t, Write(path, Header{Self: self}, bad))
	assert.Equal(t, 1, taken, "nothing is taken after the error")
	st, err := Read(path)
	require.NoError(t, err, "the former file stays")
	assert.Equal(t, sample(), st)
}

// A file changed in place after Open (not replaced, as Write does) is
// caught by Deltas: cut short, or altered, it returns a checksum error.
func TestDeltasCatchesAFileChangedSinceOpen(t *testing.T) {
	for _, change := range []string{"emptied", "cut at a delta", "altered"} {
		path := filepath.Join(t.TempDir(), "state")
		require.NoError(t, write(path, sample()))
		f, err := Open(path)
		require.NoError(t, err)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		switch change {
		case "emptied":
			require.NoError(t, os.Truncate(path, 0))
		case "cut at a delta":
			one, err := Encode(&State{Self: self, SavedAt: 1234567890, Deltas: sample().Deltas[:1]})
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, withCRC(one[:len(one)-4]), 0o600))
		case "altered":
			b[len(b)-6] ^= 0x01 // a count of the last delta
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}
		err = f.Deltas(func(*wire.Delta) error { return nil })
		assert.ErrorIs(t, err, ErrCorrupt, change)
		require.NoError(t, f.Close())
	}
}

// TestCollect: a streamed snapshot's deltas merge into one per sender,
// sorted by sender, each section's items included, copied.
func TestCollect(t *testing.T) {
	st := sample()
	agg, node := st.Deltas[0], st.Deltas[1]
	more := wire.Delta{Sender: self, Entries: []crdt.Entry{{Rule: "ip", Key: "y", Window: 6, Count: 2}}}
	modes.Section.Set(&more, []modes.RuleMode{{Rule: "api", Mode: modes.Off, At: 5, By: self}})
	got := Collect(FromSlice([]wire.Delta{node, agg, more}))
	require.Len(t, got, 2)
	assert.Equal(t, agg.Sender, got[0].Sender, "sorted by sender")
	assert.Equal(t, append(append([]crdt.Entry(nil), node.Entries...), more.Entries...), got[1].Entries)
	assert.Equal(t, modes.Section.Items(&more), modes.Section.Items(&got[1]))
	got[1].Entries[0].Count = 99
	assert.Equal(t, uint64(3), node.Entries[0].Count, "copied")
}
