// Package statefile reads and writes a node's state file: the counts of the
// live windows that a restarted node loads so that it does not admit again
// what its former incarnation admitted (pop.Node.Snapshot, Restore).
//
//	err := statefile.Write(path, self, now, node.Snapshot(now))
//	st, err := statefile.Read(path) // errors.Is(err, fs.ErrNotExist): none yet
//	node.Restore(now, st.Deltas)
//
// Format, version 1: the magic "glstate\x00", a version byte, the writer's
// clock (int64, big endian, Unix nanoseconds), the writer's replica
// (uvarint length, string), then the deltas, each a uvarint length and a
// delta in the replication wire format (crdt.Encode), and last a CRC-32C
// of everything before it. A file that is truncated, corrupted, of another
// version or too large is refused whole with an error; nothing in it is
// trusted beyond what crdt.Decode and pop.Node.Restore check.
//
// The functions are safe for concurrent use on different paths.
package statefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/geolimit/geolimit/crdt"
)

// Version is the format version Write writes and Read reads.
const Version = 1

// MaxBytes is the largest state file Read accepts.
const MaxBytes = 1 << 30

const magic = "glstate\x00"

// headerLen is the fixed part of the header: magic, version, saved-at.
const headerLen = len(magic) + 1 + 8

// Errors of Read.
var (
	ErrCorrupt = errors.New("statefile: corrupt")
	ErrVersion = errors.New("statefile: unsupported version")
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// State is what a state file holds.
type State struct {
	// Self is the replica that wrote it.
	Self crdt.Replica
	// SavedAt is the writer's clock when it wrote it (Unix nanoseconds).
	SavedAt int64
	// Deltas are the counts, one or more deltas per replica.
	Deltas []crdt.Delta
}

// Encode returns the file content for st.
func Encode(st *State) ([]byte, error) {
	if err := st.Self.Validate(); err != nil {
		return nil, fmt.Errorf("statefile: self: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(magic)
	b.WriteByte(Version)
	b.Write(binary.BigEndian.AppendUint64(nil, uint64(st.SavedAt)))
	self := st.Self.String()
	b.Write(binary.AppendUvarint(nil, uint64(len(self))))
	b.WriteString(self)
	for i := range st.Deltas {
		msgs, err := crdt.Encode(&st.Deltas[i], crdt.MaxDeltaBytes)
		if err != nil {
			return nil, fmt.Errorf("statefile: %w", err)
		}
		for _, m := range msgs {
			b.Write(binary.AppendUvarint(nil, uint64(len(m))))
			b.Write(m)
		}
	}
	if b.Len()+4 > MaxBytes {
		return nil, fmt.Errorf("statefile: %d bytes, more than %d", b.Len()+4, MaxBytes)
	}
	b.Write(binary.BigEndian.AppendUint32(nil, crc32.Checksum(b.Bytes(), crcTable)))
	return b.Bytes(), nil
}

// Decode parses file content b. A file whose checksum, framing or deltas
// are wrong is refused whole (ErrCorrupt); another version, ErrVersion.
func Decode(b []byte) (*State, error) {
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrCorrupt, len(b), MaxBytes)
	}
	if len(b) < headerLen+1+4 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a state file", ErrCorrupt)
	}
	if v := b[len(magic)]; v != Version {
		return nil, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or altered)", ErrCorrupt)
	}
	st := &State{SavedAt: int64(binary.BigEndian.Uint64(b[len(magic)+1 : headerLen]))}
	rest := body[headerLen:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > crdt.MaxNameLen*4 || n > uint64(len(rest)-k) {
		return nil, fmt.Errorf("%w: writer's name", ErrCorrupt)
	}
	self, err := parseReplica(string(rest[k : k+int(n)]))
	if err != nil {
		return nil, fmt.Errorf("%w: writer: %v", ErrCorrupt, err)
	}
	st.Self = self
	rest = rest[k+int(n):]
	dec := crdt.NewDecoder()
	for len(rest) > 0 {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return nil, fmt.Errorf("%w: delta framing", ErrCorrupt)
		}
		var d crdt.Delta
		if err := dec.Decode(rest[k:k+int(n)], &d); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		st.Deltas = append(st.Deltas, d)
		rest = rest[k+int(n):]
	}
	return st, nil
}

// Read reads and decodes the state file at path. A missing file returns an
// error wrapping fs.ErrNotExist.
func Read(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("statefile: read %s: %w", path, err)
	}
	return Decode(b)
}

// Write writes st to path atomically: to a temporary file in the same
// directory, synced, renamed over path, and the directory synced, so that a
// crash at any point leaves either the former file or the new one whole.
func Write(path string, st *State) error {
	b, err := Encode(st)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("statefile: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("statefile: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("statefile: sync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("statefile: close: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("statefile: rename: %w", err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		_ = d.Close()
	}
	return nil
}

// parseReplica parses region/pop/node#incarnation (Replica.String).
func parseReplica(s string) (crdt.Replica, error) {
	name, inc, ok := strings.Cut(s, "#")
	parts := strings.Split(name, "/")
	if !ok || len(parts) != 3 {
		return crdt.Replica{}, fmt.Errorf("%q is not region/pop/node#incarnation", s)
	}
	n, err := strconv.ParseUint(inc, 10, 64)
	if err != nil {
		return crdt.Replica{}, fmt.Errorf("%q: incarnation: %w", s, err)
	}
	r := crdt.Replica{Region: parts[0], PoP: parts[1], Node: parts[2], Incarnation: n}
	return r, r.Validate()
}
