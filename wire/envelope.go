package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/wire/codec"
	"github.com/vmihailenco/msgpack/v5"
)

// EnvelopeVersion is the wire version Encode writes: one envelope, a header
// and a list of typed sections,
//
//	[7, [region, pop, node, incarnation], sentAt, epoch,
//	  [kind, body, kind, body, ...]]
//
// where each body is a msgpack binary holding one section's msgpack value.
// The version changes only when the envelope's own shape changes; a new
// replicated feature is a new section kind. A receiver skips the sections
// of kinds it does not know, whole, and counts them (Delta.Skipped), so a
// node that knows one more kind never breaks an older peer: a rolling
// upgrade is a normal day. Decode still reads versions 1 to 6, the earlier
// formats, in which the version number told what the message carried.
const EnvelopeVersion = 7

// SectionKind says what a section of an envelope carries.
type SectionKind uint64

// SectionCounts is the counts' kind, the one kind this package encodes
// itself (see Register): windowed G-counter entries grouped by rule,
//
//	[[rule, baseWindow, [key, windowOffset, count, ...]], ...]
//
// Every other kind is registered by the package that owns it, which
// documents its body; the kinds taken today are 2 (replicated/blocks), 3
// (replicated/memos), 4 and 6 (replicated/modes, unsigned and signed) and 5
// (replicated/inflight).
const SectionCounts SectionKind = 1

func (k SectionKind) String() string {
	if k == SectionCounts {
		return "counts"
	}
	if s, alt := registered(k); s != nil {
		name, altName := s.names()
		if alt {
			return altName
		}
		return name
	}
	return fmt.Sprintf("kind %d", uint64(k))
}

// MaxSections is the most sections one envelope may hold, of known kinds
// and unknown ones alike.
const MaxSections = 64

// sectionBound is an upper bound of a section's size beyond its items'
// groups: its kind, its binary header and its body's array header.
const sectionBound = 9 + 5 + 5

// msgWriter builds envelopes of at most max bytes each: it opens one, adds
// sections while they fit and closes it into out when the next does not.
type msgWriter struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
	d   *Delta
	max int
	out [][]byte
	// open: a message is being built; nsec is its sections so far and
	// secLen the offset of its sections array's length.
	open   bool
	nsec   int
	secLen int
}

func (w *msgWriter) begin() error {
	w.buf.Reset()
	if err := encodeHeader(w.enc, w.d, EnvelopeVersion, 5); err != nil {
		return err
	}
	// The sections array's length is written when the message closes, and
	// its header then shrunk (so are the sections' binary headers): an
	// envelope costs a few bytes more than the message it carries.
	w.buf.Write([]byte{0xdd, 0, 0, 0, 0})
	w.secLen = w.buf.Len() - 4
	w.open, w.nsec = true, 0
	return nil
}

// room is what the next section's items may take in the open message.
func (w *msgWriter) room() int { return w.max - w.buf.Len() - sectionBound }

// end closes the open message into out, its sections array's header
// shrunk to the shortest form that holds its length.
func (w *msgWriter) end() {
	n := 2 * w.nsec
	if n <= 15 {
		shrink(w.buf, w.secLen-1, 5, []byte{0x90 | byte(n)})
	} else {
		shrink(w.buf, w.secLen-1, 5, []byte{0xdc, byte(n >> 8), byte(n)})
	}
	w.out = append(w.out, bytes.Clone(w.buf.Bytes()))
	w.open = false
}

// shrink replaces the old bytes of buf at at with the shorter hdr, moving
// what follows them.
func shrink(buf *bytes.Buffer, at, old int, hdr []byte) {
	b := buf.Bytes()
	copy(b[at:], hdr)
	copy(b[at+len(hdr):], b[at+old:])
	buf.Truncate(len(b) - (old - len(hdr)))
}

// section adds a section of kind whose body body writes.
func (w *msgWriter) section(kind SectionKind, body func(enc *msgpack.Encoder) error) error {
	if err := w.enc.EncodeUint(uint64(kind)); err != nil {
		return err
	}
	w.buf.Write([]byte{0xc6, 0, 0, 0, 0})
	at := w.buf.Len()
	if err := body(w.enc); err != nil {
		return fmt.Errorf("wire: encode %v: %w", kind, err)
	}
	switch n := w.buf.Len() - at; {
	case n < 1<<8:
		shrink(w.buf, at-5, 5, []byte{0xc4, byte(n)})
	case n < 1<<16:
		shrink(w.buf, at-5, 5, []byte{0xc5, byte(n >> 8), byte(n)})
	default:
		binary.BigEndian.PutUint32(w.buf.Bytes()[at-4:], uint32(n))
	}
	w.nsec++
	return nil
}

// items adds n items of kind as sections, as many in each as fit: item i
// is of rule and key length at(i), itemBound and groupBound as for fit, and
// body writes the items lo to hi, whose rules are rules, as one section's
// body. A section that does not fit in the open message goes in a new one.
func (w *msgWriter) items(kind SectionKind, n, most int, at func(i int) (string, int), itemBound, groupBound int,
	body func(enc *msgpack.Encoder, lo, hi int, rules []string) error) error {
	for i := 0; i < n; {
		if !w.open {
			if err := w.begin(); err != nil {
				return err
			}
		}
		k, rules := codec.Fit(min(n-i, most), func(j int) (string, int) { return at(i + j) }, 0, itemBound, groupBound, w.room())
		if k == 0 || w.nsec >= MaxSections {
			if w.nsec == 0 {
				return fmt.Errorf("wire: encode: maxBytes %d too small for one %v item", w.max, kind)
			}
			w.end()
			continue
		}
		lo := i
		if err := w.section(kind, func(enc *msgpack.Encoder) error { return body(enc, lo, lo+k, rules) }); err != nil {
			return err
		}
		i += k
	}
	return nil
}

// decodeSections reads an envelope's sections into out: the known kinds
// decoded, the others skipped whole and counted in out.Skipped. Each body
// must be exactly one value of its kind.
func (d *Decoder) decodeSections(out *Delta) error {
	r := &d.r
	n, err := r.ArrayLen(-1, "sections")
	if err != nil {
		return err
	}
	if n%2 != 0 || n/2 > MaxSections {
		return codec.Malformed("sections: array of %d elements (want pairs, at most %d)", n, MaxSections)
	}
	for i := 0; i < n/2; i++ {
		v, err := r.Uint()
		if err != nil {
			return err
		}
		kind := SectionKind(v)
		c, err := r.PeekCode()
		if err != nil {
			return err
		}
		if c != 0xc4 && c != 0xc5 && c != 0xc6 {
			return codec.Malformed("section %v: body is not a binary", kind)
		}
		size, err := r.BytesLen()
		if err != nil {
			return err
		}
		if size < 0 || size > r.Len() {
			return codec.Malformed("section %v: %d bytes but %d left", kind, size, r.Len())
		}
		left := r.Len()
		if kind == SectionCounts {
			out.Entries, err = crdt.DecodeCounts(r, out.Entries)
		} else if s, alt := registered(kind); s != nil {
			err = s.decode(r, out, alt)
		} else {
			if err := r.Skip(size); err != nil {
				return err
			}
			out.Skipped++
			continue
		}
		if err != nil {
			return err
		}
		if used := left - r.Len(); used != size {
			return codec.Malformed("section %v: body of %d bytes holds %d", kind, size, used)
		}
	}
	return nil
}
