// Package statefile reads and writes a node's state file: the counts of the
// live windows that a restarted node loads so that it does not admit again
// what its former incarnation admitted (pop.Node.SnapshotEach, RestoreDelta).
//
//	err := statefile.Write(path, statefile.Header{Self: self, SavedAt: now}, node.SnapshotEach(now))
//	f, err := statefile.Open(path) // errors.Is(err, fs.ErrNotExist): none yet
//	err = f.Deltas(func(d *wire.Delta) error { node.RestoreDelta(now, d); return nil })
//
// Both stream: a node's state may be hundreds of megabytes, and neither
// side holds more of it in memory than one delta (and the snapshot's
// per-replica buffers, pop.Node.SnapshotEach). Open reads the file once to
// check it whole (its checksum and every delta), and Deltas once more to
// hand it out, so that a damaged file changes nothing.
//
// Format, version 1: the magic "glstate\x00", a version byte, the writer's
// clock (int64, big endian, Unix nanoseconds), the writer's replica
// (uvarint length, string), then the deltas, each a uvarint length and a
// delta in the replication wire format (wire.Encode, at most
// wire.MaxDeltaBytes), and last a CRC-32C of everything before it. A file
// that is truncated, corrupted, of another version or too large is refused
// whole with an error; nothing in it is trusted beyond what wire.Decode and
// pop.Node.RestoreDelta check.
//
// The functions are safe for concurrent use on different paths.
package statefile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// Version is the format version Write writes and Open reads.
const Version = 1

// MaxBytes is the largest state file Open accepts and Write writes.
const MaxBytes = 1 << 30

const magic = "glstate\x00"

// headerLen is the fixed part of the header: magic, version, saved-at.
const headerLen = len(magic) + 1 + 8

// Errors of Open and Decode.
var (
	ErrCorrupt = errors.New("statefile: corrupt")
	ErrVersion = errors.New("statefile: unsupported version")
	// ErrNotRegular: the path names a directory, a named pipe, a device or
	// a socket, which a state file cannot be (a pipe would block the
	// reader until someone writes to it).
	ErrNotRegular = errors.New("statefile: not a regular file")
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Header is what a state file says of itself.
type Header struct {
	// Self is the replica that wrote it.
	Self identity.Replica
	// SavedAt is the writer's clock when it wrote it (Unix nanoseconds).
	SavedAt int64
}

// State is a whole state file in memory (Encode, Decode).
type State struct {
	Self    identity.Replica
	SavedAt int64
	// Deltas are the counts, one or more deltas per replica.
	Deltas []wire.Delta
}

// Encode returns the file content for st.
func Encode(st *State) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeTo(&b, Header{Self: st.Self, SavedAt: st.SavedAt}, FromSlice(st.Deltas)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// EncodeEach returns the file content for the header and deltas, as Write
// writes it (the simulator keeps a node's state file in memory).
func EncodeEach(h Header, deltas iter.Seq[*wire.Delta]) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeTo(&b, h, deltas); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// crcWriter writes to w, keeping the CRC and the count of what it wrote.
type crcWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// encodeTo writes a state file of h and deltas to w.
func encodeTo(w io.Writer, h Header, deltas iter.Seq[*wire.Delta]) error {
	if err := h.Self.Validate(); err != nil {
		return fmt.Errorf("statefile: self: %w", err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &crcWriter{w: bw, crc: crc32.New(crcTable)}
	var head []byte
	head = append(head, magic...)
	head = append(head, Version)
	head = binary.BigEndian.AppendUint64(head, uint64(h.SavedAt))
	self := h.Self.String()
	head = binary.AppendUvarint(head, uint64(len(self)))
	head = append(head, self...)
	if _, err := cw.Write(head); err != nil {
		return fmt.Errorf("statefile: write: %w", err)
	}
	var err error
	var frame [binary.MaxVarintLen64]byte
	for d := range deltas {
		var msgs [][]byte
		if msgs, err = wire.Encode(d, wire.MaxDeltaBytes); err != nil {
			err = fmt.Errorf("statefile: %w", err)
			break
		}
		for _, m := range msgs {
			if _, err = cw.Write(binary.AppendUvarint(frame[:0], uint64(len(m)))); err == nil {
				_, err = cw.Write(m)
			}
			if err != nil {
				err = fmt.Errorf("statefile: write: %w", err)
				break
			}
		}
		if err == nil && cw.n+4 > MaxBytes {
			err = fmt.Errorf("statefile: more than %d bytes", MaxBytes)
		}
		if err != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint32(nil, cw.crc.Sum32())); err != nil {
		return fmt.Errorf("statefile: write: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("statefile: write: %w", err)
	}
	return nil
}

// FromSlice returns the deltas of ds in order, for Write.
func FromSlice(ds []wire.Delta) iter.Seq[*wire.Delta] {
	return func(yield func(*wire.Delta) bool) {
		for i := range ds {
			if !yield(&ds[i]) {
				return
			}
		}
	}
}

// Collect returns the deltas of seq (a node's SnapshotEach) copied and
// merged into one delta per sender, sorted by sender: the whole state held
// in memory at once, for tools and tests (FromSlice streams it back).
func Collect(seq iter.Seq[*wire.Delta]) []wire.Delta {
	var out []wire.Delta
	at := map[identity.Replica]int{}
	for d := range seq {
		i, ok := at[d.Sender]
		if !ok {
			i = len(out)
			at[d.Sender] = i
			out = append(out, wire.Delta{Sender: d.Sender, SentAt: d.SentAt, Epoch: d.Epoch})
		}
		out[i].AppendItems(d)
	}
	slices.SortFunc(out, func(a, b wire.Delta) int { return strings.Compare(a.Sender.String(), b.Sender.String()) })
	return out
}

// Decode parses file content b. A file whose checksum, framing or deltas
// are wrong is refused whole (ErrCorrupt); another version, ErrVersion.
func Decode(b []byte) (*State, error) {
	f, err := open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	return f.state()
}

// Read reads the whole state file at path into memory (Open, then every
// delta), for tools and tests; a node restores through Open and Deltas.
func Read(path string) (*State, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.state()
}

// state collects f into a State.
func (f *File) state() (*State, error) {
	st := &State{Self: f.Self, SavedAt: f.SavedAt}
	err := f.walk(func(d *wire.Delta) error {
		st.Deltas = append(st.Deltas, *d)
		return nil
	}, false)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// File is a state file checked whole by Open, whose deltas Deltas hands
// out.
//
// A File is not safe for concurrent use.
type File struct {
	Header
	r       io.ReaderAt
	c       io.Closer // the file, nil for none
	body    int64     // where the deltas start
	end     int64     // where they end (the checksum)
	sum     uint32    // the checksum the file ends with
	headCRC uint32    // the checksum of the header, before body
	frame   []byte    // reused for a delta's bytes
	dec     *wire.Decoder
	d       wire.Delta // reused by Deltas
}

// Open opens the state file at path and checks it whole: its size,
// version, checksum, framing and every delta. A missing file returns an
// error wrapping fs.ErrNotExist; a damaged one, ErrCorrupt or ErrVersion;
// anything but a regular file, ErrNotRegular (without blocking on a
// named pipe). Close the File when done.
func Open(path string) (*File, error) {
	// Non-blocking, so that opening a named pipe returns at once and is
	// refused below; a regular file reads as usual.
	osf, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("statefile: %w", err)
	}
	fi, err := osf.Stat()
	if err != nil {
		_ = osf.Close()
		return nil, fmt.Errorf("statefile: %w", err)
	}
	if !fi.Mode().IsRegular() {
		_ = osf.Close()
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, path, kind(fi.Mode()))
	}
	f, err := open(osf, fi.Size())
	if err != nil {
		_ = osf.Close()
		return nil, err
	}
	f.c = osf
	return f, nil
}

// kind names a file mode's type for an error.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// Close closes the file.
func (f *File) Close() error {
	if f.c == nil {
		return nil
	}
	return f.c.Close()
}

// Deltas calls fn with each delta of the file, in order, stopping at fn's
// first error and returning it. d is reused for the next one: fn must not
// keep it. Deltas reads the file again and checks its checksum again: an
// error reading it, or a file changed since Open (by something other than
// Write, which replaces it), is returned too, after the deltas read before.
func (f *File) Deltas(fn func(d *wire.Delta) error) error {
	return f.walk(fn, true)
}

// open checks the size bytes of r (see Open).
func open(r io.ReaderAt, size int64) (*File, error) {
	if size > MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrCorrupt, size, MaxBytes)
	}
	if size < int64(headerLen+1+4) {
		return nil, fmt.Errorf("%w: not a state file", ErrCorrupt)
	}
	var head [headerLen + binary.MaxVarintLen64 + 4*identity.MaxNameLen]byte
	n, err := r.ReadAt(head[:min(int64(len(head)), size-4)], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("statefile: read: %w", err)
	}
	if n < headerLen+1 || string(head[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a state file", ErrCorrupt)
	}
	if v := head[len(magic)]; v != Version {
		return nil, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	f := &File{r: r, end: size - 4, dec: wire.NewDecoder()}
	var sum [4]byte
	if _, err := r.ReadAt(sum[:], f.end); err != nil {
		return nil, fmt.Errorf("statefile: read: %w", err)
	}
	f.sum = binary.BigEndian.Uint32(sum[:])
	f.SavedAt = int64(binary.BigEndian.Uint64(head[len(magic)+1 : headerLen]))
	ln, k := binary.Uvarint(head[headerLen:n])
	if k <= 0 || ln > identity.MaxNameLen*4 || headerLen+k+int(ln) > n {
		return nil, f.damaged(fmt.Errorf("%w: writer's name", ErrCorrupt))
	}
	name := head[headerLen+k : headerLen+k+int(ln)]
	f.body = int64(headerLen + k + int(ln))
	f.headCRC = crc32.Checksum(head[:f.body], crcTable)
	if f.Self, err = identity.ParseReplica(string(name)); err != nil {
		return nil, f.damaged(fmt.Errorf("%w: writer: %v", ErrCorrupt, err))
	}
	// Every delta must decode, and the checksum match, before any delta is
	// handed out.
	if err := f.walk(func(*wire.Delta) error { return nil }, true); err != nil {
		return nil, err
	}
	return f, nil
}

// damaged returns err, or, when the file's checksum does not match, a
// checksum error: a file damaged on disk is told from one whose content
// was wrong when written.
func (f *File) damaged(err error) error {
	cr := &crcReader{r: io.NewSectionReader(f.r, 0, f.end)}
	if _, rerr := io.Copy(io.Discard, cr); rerr != nil {
		return fmt.Errorf("statefile: read: %w", rerr)
	}
	if cr.crc != f.sum || cr.n != f.end {
		return fmt.Errorf("%w: checksum mismatch (truncated or altered)", ErrCorrupt)
	}
	return err
}

// crcReader reads through r, adding what it reads to crc and n.
type crcReader struct {
	r   io.Reader
	crc uint32
	n   int64
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, crcTable, p[:n])
	c.n += int64(n)
	return n, err
}

// walk decodes the deltas in order and calls fn with each, into f.d when
// reuse is set and into a fresh Delta otherwise, and checks the checksum
// as it reads: a file that changed since open is caught too, though after
// the deltas before the change were handed out. fn's error is returned as
// it is.
func (f *File) walk(fn func(*wire.Delta) error, reuse bool) error {
	cr := &crcReader{r: io.NewSectionReader(f.r, f.body, f.end-f.body), crc: f.headCRC}
	br := bufio.NewReaderSize(cr, 64<<10)
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("statefile: read: %w", err)
		}
		n, err := binary.ReadUvarint(br)
		if err != nil || n > wire.MaxDeltaBytes {
			return f.damaged(fmt.Errorf("%w: delta framing", ErrCorrupt))
		}
		if cap(f.frame) < int(n) {
			f.frame = make([]byte, n)
		}
		b := f.frame[:n]
		if _, err := io.ReadFull(br, b); err != nil {
			return f.damaged(fmt.Errorf("%w: delta framing", ErrCorrupt))
		}
		d := &f.d
		if !reuse {
			d = new(wire.Delta)
		}
		if err := f.dec.Decode(b, d); err != nil {
			return f.damaged(fmt.Errorf("%w: %v", ErrCorrupt, err))
		}
		if err := fn(d); err != nil {
			return err
		}
	}
	if cr.crc != f.sum || cr.n != f.end-f.body {
		return fmt.Errorf("%w: checksum mismatch (truncated or altered)", ErrCorrupt)
	}
	return nil
}

// Write writes a state file of h and deltas to path atomically: to a
// temporary file in the same directory, synced, renamed over path, and the
// directory synced, so that a crash at any point leaves either the former
// file or the new one whole. It stops taking deltas at the first error.
func Write(path string, h Header, deltas iter.Seq[*wire.Delta]) error {
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
	if err := encodeTo(tmp, h, deltas); err != nil {
		return err
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
