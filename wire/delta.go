// Package wire is the replication wire format: the Delta a node sends (one
// sender's counts and the items of every other replicated feature) and its
// encoding, one envelope with a real version and typed sections (see
// EnvelopeVersion). The counts are crdt's; every other section kind is
// registered by the package that owns the feature (see Register), which
// writes and reads its bodies and reaches a delta's items through the
// handle it registered (replicated/blocks, replicated/memos,
// replicated/modes, replicated/inflight). This package only puts sections
// in envelopes, splits a delta under a size, and skips the sections of
// kinds its binary does not know.
//
//	msgs, err := wire.Encode(&wire.Delta{Sender: self, SentAt: now, Entries: es}, 0)
//	dec := wire.NewDecoder()
//	var d wire.Delta
//	err = dec.Decode(msgs[0], &d) // d.Skipped: sections of unknown kinds
//	bs := blocks.Section.Items(&d) // a registered feature's items
//
// Encode is safe for concurrent use; a Decoder is not.
package wire

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire/codec"
)

// The earlier wire versions, which Decode still reads and Encode no longer
// writes (see EnvelopeVersion): in them the version number told what a
// message carried. Version 1 is version 2 without an epoch.
//
//	v2: [2, [region, pop, node, incarnation], sentAt, epoch, counts]
//	v1: [1, [region, pop, node, incarnation], sentAt, counts]
//	v3: [3, sender, sentAt, epoch, counts, blocks]
//	v4: [4, sender, sentAt, epoch, counts, blocks, memos]
//	v5: [5, sender, sentAt, epoch, modes]
//	v6: [6, sender, sentAt, epoch, inflight]
//
// where counts, blocks, memos, modes and inflight are the bodies of the
// sections of those kinds (legacyKinds): the earlier versions are read
// through the same registrations as version 7.
const (
	// DeltaVersion: counts.
	DeltaVersion = 2
	// BlockVersion: penalty blocks, after an empty counts array.
	BlockVersion = 3
	// MemoVersion: remembered decisions, after empty counts and blocks.
	MemoVersion = 4
	// ModeVersion: rule modes only.
	ModeVersion = 5
	// InflightVersion: in-flight counts only.
	InflightVersion = 6
)

const (
	// MaxDeltaBytes is the largest encoded delta (NATS's default max_payload).
	MaxDeltaBytes = 1 << 20
	// MaxDeltaEntries is the most items of one kind one message may carry.
	MaxDeltaEntries = codec.MaxItems
)

// Decode errors.
var (
	ErrDeltaTooLarge  = errors.New("wire: delta larger than MaxDeltaBytes")
	ErrDeltaVersion   = errors.New("wire: unsupported delta version")
	ErrDeltaMalformed = codec.ErrMalformed
)

// Delta is a batch of what one sender replica says. Because every item is
// an absolute value merged by a rule that forgives loss, duplication and
// reordering, a delta can be lost, duplicated or reordered without harm: a
// later one repairs an earlier loss. What a receiver takes of each section
// from which sender is the owning feature's trust rule (docs/security.md).
//
// Beside the counts, a delta's items are reached through the handles of
// their registered sections (Section.Items, Section.Set). A Delta is a
// value: copying it copies its items' slice headers, as for Entries.
type Delta struct {
	// Sender owns every count of the batch.
	Sender identity.Replica
	// SentAt is the sender's clock (Unix nanoseconds) when it flushed the batch,
	// used only to measure replication lag.
	SentAt int64
	// Epoch is the sender's PoP epoch, carried between members of a PoP; 0
	// means unknown.
	Epoch uint64
	// Entries are the sender's own counts (crdt), or its PoP's or region's
	// totals for an aggregate sender.
	Entries []crdt.Entry
	// sections are the items of the registered sections, one slot per
	// registration.
	sections [MaxRegistered]slot
	// Skipped is, for a decoded delta, the number of sections of kinds this
	// version does not know, skipped whole (a newer peer's feature). Encode
	// ignores it.
	Skipped int
}

// headerBound is an upper bound of an envelope's size beyond its sections:
// array, version, sender (array, three names, incarnation), sentAt, epoch,
// sections array.
const headerBound = 1 + 1 + 1 + 3*(codec.MaxNameLen+3) + 9 + 9 + 9 + 5

// Encode encodes d into one or more envelopes (EnvelopeVersion) of at most
// maxBytes each (MaxDeltaBytes if maxBytes <= 0 or larger), splitting its
// items as needed. Every message carries d's sender, SentAt and Epoch, and
// sections in this order: counts, then the registered kinds in the order of
// their kinds, as many in one message as fit; a delta with none of them is
// one envelope with no sections.
func Encode(d *Delta, maxBytes int) ([][]byte, error) {
	if maxBytes <= 0 || maxBytes > MaxDeltaBytes {
		maxBytes = MaxDeltaBytes
	}
	if err := d.Sender.Validate(); err != nil {
		return nil, err
	}
	if maxBytes < headerBound+sectionBound+crdt.CountsGroupBound+codec.MaxKeyLen+crdt.EntryBound {
		return nil, fmt.Errorf("wire: encode: maxBytes %d too small for one entry", maxBytes)
	}
	if err := check(d); err != nil {
		return nil, fmt.Errorf("wire: encode: %w", err)
	}
	st := encoders.Get().(*encoder)
	defer st.put()
	w := &st.w
	*w = msgWriter{buf: &st.buf, enc: st.enc, d: d, max: maxBytes}
	err := w.items(SectionCounts, len(d.Entries), codec.MaxItems, func(i int) (string, int) { return d.Entries[i].Rule, len(d.Entries[i].Key) },
		crdt.EntryBound, crdt.CountsGroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
			return crdt.EncodeCounts(enc, d.Entries[lo:hi], rules)
		})
	for _, s := range registry {
		if err != nil {
			break
		}
		err = s.encode(w, d)
	}
	if err != nil {
		return nil, err
	}
	if !w.open && len(w.out) == 0 {
		// Nothing to carry: one envelope with no sections (a heartbeat).
		if err := w.begin(); err != nil {
			return nil, fmt.Errorf("wire: encode: %w", err)
		}
	}
	if w.open {
		w.end()
	}
	return w.out, nil
}

// check returns an error for the first item of d that cannot be encoded.
func check(d *Delta) error {
	for i := range d.Entries {
		if err := crdt.CheckEntry(&d.Entries[i]); err != nil {
			return err
		}
	}
	for _, s := range registry {
		if err := s.check(d); err != nil {
			return err
		}
	}
	return nil
}

// Items returns how many items d carries, counts and every registered
// section's together.
func (d *Delta) Items() int {
	n := len(d.Entries)
	for _, s := range registry {
		n += s.count(d)
	}
	return n
}

// AppendItems appends from's items, its counts and every registered
// section's, to d's (a copy: d shares no storage with from).
func (d *Delta) AppendItems(from *Delta) {
	d.Entries = append(d.Entries, from.Entries...)
	for _, s := range registry {
		s.appendItems(d, from)
	}
}

// ClearSections drops d's items of every registered section, keeping its
// counts.
func (d *Delta) ClearSections() { d.sections = [MaxRegistered]slot{} }

// SectionBytes returns an upper bound of the encoded size of d's items
// beyond its counts (their sections' and rule groups' headers left out).
func (d *Delta) SectionBytes() int {
	n := 0
	for _, s := range registry {
		n += s.bytes(d)
	}
	return n
}

// Sections returns how many items d carries beyond its counts.
func (d *Delta) Sections() int { return d.Items() - len(d.Entries) }

// encoder is a buffer and a msgpack encoder writing to it, reused across
// Encode calls through encoders: most deltas are small, and a new encoder
// and a growing buffer cost more than encoding them.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
	w   msgWriter
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}}

// put returns e to the pool, unless a large batch grew its buffer: that
// memory goes back to the garbage collector rather than staying pooled.
func (e *encoder) put() {
	e.w = msgWriter{}
	if e.buf.Cap() <= 64<<10 {
		e.buf.Reset()
		encoders.Put(e)
	}
}

// encodeHeader writes the start of a message of version with fields
// top-level fields: the array, the version, the sender, SentAt and Epoch.
func encodeHeader(enc *msgpack.Encoder, d *Delta, version uint64, fields int) error {
	return errors.Join(
		enc.EncodeArrayLen(fields),
		enc.EncodeUint(version),
		enc.EncodeArrayLen(4),
		enc.EncodeString(d.Sender.Region),
		enc.EncodeString(d.Sender.PoP),
		enc.EncodeString(d.Sender.Node),
		enc.EncodeUint(d.Sender.Incarnation),
		enc.EncodeInt(d.SentAt),
		enc.EncodeUint(d.Epoch),
	)
}

// Decoder decodes deltas, reusing its buffers between calls. The zero value
// is ready. A Decoder is not safe for concurrent use.
type Decoder struct {
	r codec.Reader
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder { return &Decoder{} }

// Decode decodes one delta of version 1 to 7 into out (reusing the storage
// of out's items; a version 1 delta has Epoch 0). Hostile input
// (truncated, wrong types, huge length prefixes, a wrong version, trailing
// bytes) returns an error wrapping ErrDeltaMalformed, ErrDeltaTooLarge or
// ErrDeltaVersion, and leaves out empty; nothing is allocated by a length
// the input chooses before that length is checked against the caps and the
// bytes left. All keys of one delta share one allocation.
func (d *Decoder) Decode(b []byte, out *Delta) error {
	if len(b) > MaxDeltaBytes {
		return ErrDeltaTooLarge
	}
	d.r.Reset(b)
	out.reset()
	err := d.decode(out)
	if err == nil && d.r.Len() != 0 {
		err = codec.Malformed("%d trailing bytes", d.r.Len())
	}
	if err != nil {
		out.reset()
		if errors.Is(err, ErrDeltaVersion) || errors.Is(err, ErrDeltaMalformed) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrDeltaMalformed, err)
	}
	return nil
}

func (out *Delta) reset() {
	out.Entries = out.Entries[:0]
	for i := range out.sections {
		out.sections[i].n = 0 // the storage is kept for the next decode
	}
	out.Skipped = 0
}

// Decode decodes one delta with a fresh Decoder.
func Decode(b []byte) (*Delta, error) {
	var out Delta
	if err := NewDecoder().Decode(b, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (d *Decoder) decode(out *Delta) error {
	r := &d.r
	fields, err := r.ArrayLen(-1, "delta")
	if err != nil {
		return err
	}
	if fields < 4 {
		return codec.Malformed("delta: array of %d elements", fields)
	}
	v, err := r.Uint()
	if err != nil {
		return err
	}
	switch {
	case v == EnvelopeVersion || v == ModeVersion || v == InflightVersion:
		if fields != 5 {
			return codec.Malformed("version %d delta: array of %d elements", v, fields)
		}
	case v < 1 || v > EnvelopeVersion:
		return fmt.Errorf("%w: %d", ErrDeltaVersion, v)
	case fields != int(v)+3:
		return codec.Malformed("version %d delta: array of %d elements", v, fields)
	}
	if _, err := r.ArrayLen(4, "sender"); err != nil {
		return err
	}
	for _, p := range [3]*string{&out.Sender.Region, &out.Sender.PoP, &out.Sender.Node} {
		if *p, err = r.Name("sender name"); err != nil {
			return err
		}
	}
	if out.Sender.Incarnation, err = r.Uint(); err != nil {
		return err
	}
	if err := out.Sender.Validate(); err != nil {
		return codec.Malformed("%v", err)
	}
	if out.SentAt, err = r.Int64(); err != nil {
		return err
	}
	out.Epoch = 0
	if v >= 2 {
		if out.Epoch, err = r.Uint(); err != nil {
			return err
		}
	}
	if v == EnvelopeVersion {
		return d.decodeSections(out)
	}
	// Versions 1 to 6: counts (1 to 4), then the bodies of legacyKinds[v].
	if v <= MemoVersion {
		if out.Entries, err = crdt.DecodeCounts(r, out.Entries); err != nil {
			return err
		}
	}
	for _, kind := range legacyKinds[v] {
		s, alt := registered(kind)
		if s == nil {
			return codec.Malformed("version %d delta: section %v not known to this binary", v, kind)
		}
		if err := s.decode(r, out, alt); err != nil {
			return err
		}
	}
	return nil
}

// legacyKinds are the kinds whose bodies versions 1 to 6 carry after their
// headers (and their counts, for versions 1 to 4): a fixed record of those
// formats, not a list to extend.
var legacyKinds = [EnvelopeVersion][]SectionKind{
	BlockVersion:    {2},
	MemoVersion:     {2, 3},
	ModeVersion:     {4},
	InflightVersion: {5},
}
