// Package wire is the replication wire format: the Delta a node sends (one
// sender's counts, blocks, memos, modes and in-flight counts) and its
// encoding, one envelope with a real version and typed sections (see
// EnvelopeVersion). Each section's body is written and read by the package
// that owns that replicated state (crdt for counts, replicated/blocks,
// replicated/memos, replicated/modes, replicated/inflight); this package
// only puts sections in envelopes, splits a delta under a size, and skips
// the sections of kinds it does not know.
//
//	msgs, err := wire.Encode(&wire.Delta{Sender: self, SentAt: now, Entries: es}, 0)
//	dec := wire.NewDecoder()
//	var d wire.Delta
//	err = dec.Decode(msgs[0], &d) // d.Skipped: sections of unknown kinds
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
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/replicated/inflight"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/replicated/modes"
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
// sections of those kinds.
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
// from which sender is the owning package's trust rule (docs/security.md).
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
	// Blocks are penalty blocks (rule, key, until), merged by max.
	Blocks []blocks.Block
	// Memos are remembered decisions (rule, ID, until, verdict), merged by
	// memos.Merge.
	Memos []memos.Memo
	// Modes are rules' modes set at run time, merged by modes.Merge.
	Modes []modes.RuleMode
	// Inflight are the sender's own in-flight counts of concurrency rules,
	// each with its version.
	Inflight []inflight.Count
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
// sections in this order: counts, blocks, memos, modes, in-flight counts,
// as many in one message as fit; a delta with none of them is one envelope
// with no sections.
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
	w := msgWriter{buf: &st.buf, enc: st.enc, d: d, max: maxBytes}
	err := errors.Join(
		w.items(SectionCounts, len(d.Entries), codec.MaxItems, func(i int) (string, int) { return d.Entries[i].Rule, len(d.Entries[i].Key) },
			crdt.EntryBound, crdt.CountsGroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return crdt.EncodeCounts(enc, d.Entries[lo:hi], rules)
			}),
		w.items(SectionBlocks, len(d.Blocks), codec.MaxItems, func(i int) (string, int) { return d.Blocks[i].Rule, len(d.Blocks[i].Key) },
			blocks.ItemBound, codec.GroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return blocks.Encode(enc, d.Blocks[lo:hi], rules)
			}),
		w.items(SectionMemos, len(d.Memos), codec.MaxItems, func(i int) (string, int) { return d.Memos[i].Rule, 0 },
			memos.ItemBound, codec.GroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return memos.Encode(enc, d.Memos[lo:hi], rules)
			}),
		w.modes(d.Modes),
		w.items(SectionInflight, len(d.Inflight), codec.MaxItems, func(i int) (string, int) { return d.Inflight[i].Rule, len(d.Inflight[i].Key) },
			inflight.ItemBound, codec.GroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return inflight.Encode(enc, d.Inflight[lo:hi], rules)
			}),
	)
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
	for i := range d.Blocks {
		if err := blocks.Check(&d.Blocks[i]); err != nil {
			return err
		}
	}
	for i := range d.Memos {
		if err := memos.Check(&d.Memos[i]); err != nil {
			return err
		}
	}
	for i := range d.Modes {
		if err := modes.Check(&d.Modes[i]); err != nil {
			return err
		}
	}
	for i := range d.Inflight {
		if err := inflight.Check(&d.Inflight[i]); err != nil {
			return err
		}
	}
	return nil
}

// encoder is a buffer and a msgpack encoder writing to it, reused across
// Encode calls through encoders: most deltas are small, and a new encoder
// and a growing buffer cost more than encoding them.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}}

// put returns e to the pool, unless a large batch grew its buffer: that
// memory goes back to the garbage collector rather than staying pooled.
func (e *encoder) put() {
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

// Decode decodes one delta of version 1 to 7 into out (reusing out's
// slices' storage; a version 1 delta has Epoch 0). Hostile input
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
	out.Blocks = out.Blocks[:0]
	out.Memos = out.Memos[:0]
	out.Modes = out.Modes[:0]
	out.Inflight = out.Inflight[:0]
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
	switch v {
	case EnvelopeVersion:
		return d.decodeSections(out)
	case ModeVersion:
		out.Modes, err = modes.Decode(r, out.Modes, false)
		return err
	case InflightVersion:
		out.Inflight, err = inflight.Decode(r, out.Inflight)
		return err
	}
	// Versions 1 to 4: counts, then blocks (3 and 4), then memos (4).
	if out.Entries, err = crdt.DecodeCounts(r, out.Entries); err != nil {
		return err
	}
	if v >= BlockVersion {
		if out.Blocks, err = blocks.Decode(r, out.Blocks); err != nil {
			return err
		}
	}
	if v >= MemoVersion {
		out.Memos, err = memos.Decode(r, out.Memos)
	}
	return err
}
