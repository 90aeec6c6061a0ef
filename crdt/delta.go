package crdt

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// The earlier wire versions, which Decode still reads and Encode no longer
// writes (see EnvelopeVersion): in them the version number told what a
// message carried. Version 1 is version 2 without an epoch.
const (
	// DeltaVersion: counts.
	DeltaVersion = 2
	// BlockVersion: penalty blocks, after an empty counts array.
	BlockVersion = 3
	// MemoVersion: remembered decisions, after empty counts and blocks.
	MemoVersion = 4
)

// Hard caps checked while decoding, before anything is allocated.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 256
	// MaxRuleNameLen is the longest rule name, in bytes.
	MaxRuleNameLen = 64
	// MaxDeltaEntries is the most entries one encoded delta may carry.
	MaxDeltaEntries = 1 << 16
	// MaxDeltaBytes is the largest encoded delta (NATS's default max_payload).
	MaxDeltaBytes = 1 << 20
	// maxGroups is the most rule groups in one delta.
	maxGroups = MaxRules
)

// Decode errors.
var (
	ErrDeltaTooLarge  = errors.New("crdt: delta larger than MaxDeltaBytes")
	ErrDeltaVersion   = errors.New("crdt: unsupported delta version")
	ErrDeltaMalformed = errors.New("crdt: malformed delta")
)

// Entry is one absolute count: the sender's own count of (Rule, Key, Window);
// for a PoP aggregate sender, the PoP total.
type Entry struct {
	Rule   string
	Key    string
	Window int64
	Count  uint64
}

// Delta is a batch of entries owned by one sender replica. Because entries are
// absolute, a delta can be lost, duplicated or reordered without harm: a later
// one repairs an earlier loss.
type Delta struct {
	// Sender owns every entry of the batch.
	Sender Replica
	// SentAt is the sender's clock (Unix nanoseconds) when it flushed the batch,
	// used only to measure replication lag.
	SentAt int64
	// Epoch is the sender's PoP epoch, carried between members of a PoP; 0
	// means unknown.
	Epoch   uint64
	Entries []Entry
	// Blocks are penalty blocks (rule, key, until), merged by max; any
	// replica may send any block it holds.
	Blocks []Block
	// Memos are remembered decisions (rule, ID, until, verdict), merged by
	// MergeMemo; any replica may send any memo it holds.
	Memos []Memo
	// Modes are rules' modes set at run time (RuleMode), merged by
	// MergeRuleMode; any replica may send any it holds.
	Modes []RuleMode
	// Inflight are the sender's own in-flight counts of concurrency rules
	// (inflight.go), each with its version.
	Inflight []Inflight
	// Skipped is, for a decoded delta, the number of sections of kinds this
	// version does not know, skipped whole (a newer peer's feature). Encode
	// ignores it.
	Skipped int
}

// Wire format: see EnvelopeVersion. Counts are grouped by rule with window
// offsets, so an IPv4 key costs about 16 bytes. The earlier versions:
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

// entryBound is an upper bound of one encoded entry's size beyond its key.
const entryBound = 3 + 9 + 9

// headerBound is an upper bound of a delta's size beyond its groups: array,
// version, sender (array, three names, incarnation), sentAt, epoch, groups array.
const headerBound = 1 + 1 + 1 + 3*(MaxNameLen+3) + 9 + 9 + 9 + 5

// groupBound is an upper bound of a rule group's size beyond its entries.
const groupBound = 1 + MaxRuleNameLen + 3 + 9 + 5

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
	if maxBytes < headerBound+groupBound+MaxKeyLen+entryBound {
		return nil, fmt.Errorf("crdt: encode: maxBytes %d too small for one entry", maxBytes)
	}
	for i := range d.Entries {
		e := &d.Entries[i]
		if len(e.Key) == 0 || len(e.Key) > MaxKeyLen {
			return nil, fmt.Errorf("crdt: encode: key of %d bytes (want 1-%d)", len(e.Key), MaxKeyLen)
		}
		if len(e.Rule) == 0 || len(e.Rule) > MaxRuleNameLen {
			return nil, fmt.Errorf("crdt: encode: rule name of %d bytes (want 1-%d)", len(e.Rule), MaxRuleNameLen)
		}
	}
	for i := range d.Blocks {
		e := &d.Blocks[i]
		if len(e.Key) == 0 || len(e.Key) > MaxKeyLen {
			return nil, fmt.Errorf("crdt: encode: block key of %d bytes (want 1-%d)", len(e.Key), MaxKeyLen)
		}
		if len(e.Rule) == 0 || len(e.Rule) > MaxRuleNameLen {
			return nil, fmt.Errorf("crdt: encode: block rule name of %d bytes (want 1-%d)", len(e.Rule), MaxRuleNameLen)
		}
	}
	for i := range d.Memos {
		if e := &d.Memos[i]; len(e.Rule) == 0 || len(e.Rule) > MaxRuleNameLen {
			return nil, fmt.Errorf("crdt: encode: memo rule name of %d bytes (want 1-%d)", len(e.Rule), MaxRuleNameLen)
		}
	}
	if err := checkInflight(d); err != nil {
		return nil, err
	}
	st := encoders.Get().(*encoder)
	defer st.put()
	w := msgWriter{buf: &st.buf, enc: st.enc, d: d, max: maxBytes}
	err := errors.Join(
		w.items(SectionCounts, len(d.Entries), MaxDeltaEntries, func(i int) (string, int) { return d.Entries[i].Rule, len(d.Entries[i].Key) },
			entryBound, groupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return encodeCounts(enc, d.Entries[lo:hi], rules)
			}),
		w.items(SectionBlocks, len(d.Blocks), MaxDeltaEntries, func(i int) (string, int) { return d.Blocks[i].Rule, len(d.Blocks[i].Key) },
			blockBound, blockGroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return encodeBlocks(enc, d.Blocks[lo:hi], rules)
			}),
		w.items(SectionMemos, len(d.Memos), MaxDeltaEntries, func(i int) (string, int) { return d.Memos[i].Rule, 0 },
			memoBound, memoGroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return encodeMemos(enc, d.Memos[lo:hi], rules)
			}),
		w.items(SectionModes, len(d.Modes), MaxModes, func(int) (string, int) { return "", 0 },
			modeBound, 0, func(enc *msgpack.Encoder, lo, hi int, _ []string) error {
				return encodeModes(enc, d.Modes[lo:hi])
			}),
		w.items(SectionInflight, len(d.Inflight), MaxDeltaEntries, func(i int) (string, int) { return d.Inflight[i].Rule, len(d.Inflight[i].Key) },
			inflightBound, inflightGroupBound, func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
				return encodeInflight(enc, d.Inflight[lo:hi], rules)
			}),
	)
	if err != nil {
		return nil, err
	}
	if !w.open && len(w.out) == 0 {
		// Nothing to carry: one envelope with no sections (a heartbeat).
		if err := w.begin(); err != nil {
			return nil, fmt.Errorf("crdt: encode: %w", err)
		}
	}
	if w.open {
		w.end()
	}
	return w.out, nil
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

// fit returns how many of the first n items (item i of rule and key length
// at(i)) fit in maxBytes after size bytes, at their worst-case sizes: the
// key plus itemBound for each, and groupBound once per rule; and those
// rules, in order of first use. It takes at most MaxDeltaEntries items.
func fit(n int, at func(i int) (rule string, keyLen int), size, itemBound, groupBound, maxBytes int) (int, []string) {
	var rules []string
	k := 0
	for ; k < n && k < MaxDeltaEntries; k++ {
		rule, keyLen := at(k)
		add := keyLen + itemBound
		known := contains(rules, rule)
		if !known {
			add += groupBound
		}
		if size+add > maxBytes {
			break
		}
		if !known {
			rules = append(rules, rule)
		}
		size += add
	}
	return k, rules
}

// ruleName reads a group's rule name (what names it in errors): 1 to
// MaxRuleNameLen bytes.
func (d *Decoder) ruleName(what string) (string, error) {
	rb, err := d.str(MaxRuleNameLen, what)
	if err != nil {
		return "", err
	}
	if len(rb) == 0 {
		return "", malformed("empty %s", what)
	}
	return string(rb), nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
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

// encodeCounts writes a counts section's body: entries grouped by rule
// (rules, in order), each group's windows as offsets from its lowest.
func encodeCounts(enc *msgpack.Encoder, entries []Entry, rules []string) error {
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(len(rules)))
	for _, r := range rules {
		base, n := int64(math.MaxInt64), 0
		for i := range entries {
			if entries[i].Rule == r {
				base = min(base, entries[i].Window)
				n++
			}
		}
		put(enc.EncodeArrayLen(3))
		put(enc.EncodeString(r))
		put(enc.EncodeInt(base))
		put(enc.EncodeArrayLen(3 * n))
		for i := range entries {
			e := &entries[i]
			if e.Rule != r {
				continue
			}
			if e.Window-base < 0 {
				return fmt.Errorf("window spread overflows")
			}
			put(enc.EncodeString(e.Key))
			put(enc.EncodeUint(uint64(e.Window - base)))
			put(enc.EncodeUint(e.Count))
		}
	}
	return err
}

// Decoder decodes deltas, reusing its buffers between calls. The zero value is
// not ready: use NewDecoder. A Decoder is not safe for concurrent use.
type Decoder struct {
	rd    bytes.Reader
	dec   *msgpack.Decoder
	arena []byte
	spans []span
	// bspans are the blocks' keys in arena.
	bspans []span
	// ispans are the in-flight counts' keys in arena.
	ispans []span
	tmp    [MaxKeyLen]byte
}

type span struct{ off, n int }

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	d := &Decoder{}
	d.dec = msgpack.NewDecoder(&d.rd)
	return d
}

// Decode decodes one delta of version 1 to 7 into out (reusing
// out.Entries', out.Blocks', out.Memos' and out.Modes' storage; a version 1 delta has Epoch 0). Hostile
// input (truncated, wrong types, huge length prefixes, a wrong version,
// trailing bytes) returns an error wrapping ErrDeltaMalformed, ErrDeltaTooLarge
// or ErrDeltaVersion; nothing is allocated by a length the input chooses
// before that length is checked against the caps and the bytes left. All keys
// of one delta share one allocation.
func (d *Decoder) Decode(b []byte, out *Delta) error {
	if len(b) > MaxDeltaBytes {
		return ErrDeltaTooLarge
	}
	d.rd.Reset(b)
	d.dec.Reset(&d.rd)
	d.arena = d.arena[:0]
	d.spans = d.spans[:0]
	d.bspans = d.bspans[:0]
	d.ispans = d.ispans[:0]
	out.Entries = out.Entries[:0]
	out.Blocks = out.Blocks[:0]
	out.Memos = out.Memos[:0]
	out.Modes = out.Modes[:0]
	out.Inflight = out.Inflight[:0]
	out.Skipped = 0
	if err := d.decode(out); err != nil {
		out.Entries = out.Entries[:0]
		out.Blocks = out.Blocks[:0]
		out.Memos = out.Memos[:0]
		out.Modes = out.Modes[:0]
		out.Inflight = out.Inflight[:0]
		if errors.Is(err, ErrDeltaVersion) || errors.Is(err, ErrDeltaMalformed) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrDeltaMalformed, err)
	}
	if d.rd.Len() != 0 {
		out.Entries = out.Entries[:0]
		out.Blocks = out.Blocks[:0]
		out.Memos = out.Memos[:0]
		out.Modes = out.Modes[:0]
		out.Inflight = out.Inflight[:0]
		return fmt.Errorf("%w: %d trailing bytes", ErrDeltaMalformed, d.rd.Len())
	}
	keys := string(d.arena)
	for i, s := range d.spans {
		out.Entries[i].Key = keys[s.off : s.off+s.n]
	}
	for i, s := range d.bspans {
		out.Blocks[i].Key = keys[s.off : s.off+s.n]
	}
	for i, s := range d.ispans {
		out.Inflight[i].Key = keys[s.off : s.off+s.n]
	}
	return nil
}

// Decode decodes one delta with a fresh Decoder.
func Decode(b []byte) (*Delta, error) {
	var out Delta
	if err := NewDecoder().Decode(b, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrDeltaMalformed}, args...)...)
}

// items reads the array of a group's items, each of per elements, and
// returns how many items it holds: refused unless the elements make whole
// items and the message's items (have before it) stay within
// MaxDeltaEntries.
func (d *Decoder) items(what string, per, have int) (int, error) {
	n, err := d.arrayLen(-1, what)
	if err != nil {
		return 0, err
	}
	if n%per != 0 {
		return 0, malformed("%s: %d elements, not a multiple of %d", what, n, per)
	}
	if have+n/per > MaxDeltaEntries {
		return 0, malformed("more than %d %s", MaxDeltaEntries, what)
	}
	return n / per, nil
}

// key reads an item's key: 1 to MaxKeyLen bytes.
func (d *Decoder) key(what string) ([]byte, error) {
	kb, err := d.str(MaxKeyLen, what)
	if err != nil {
		return nil, err
	}
	if len(kb) == 0 {
		return nil, malformed("empty %s", what)
	}
	return kb, nil
}

func (d *Decoder) arrayLen(want int, what string) (int, error) {
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 0 || (want >= 0 && n != want) {
		return 0, malformed("%s: array of %d elements", what, n)
	}
	// Every element takes at least one byte.
	if n > d.rd.Len() {
		return 0, malformed("%s: %d elements but %d bytes left", what, n, d.rd.Len())
	}
	return n, nil
}

// bytes reads a string or binary of at most max bytes into d.tmp.
func (d *Decoder) str(max int, what string) ([]byte, error) {
	n, err := d.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > max || n > len(d.tmp) {
		return nil, malformed("%s of %d bytes (max %d)", what, n, max)
	}
	if n > d.rd.Len() {
		return nil, malformed("%s: truncated", what)
	}
	buf := d.tmp[:n]
	if err := d.dec.ReadFull(buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// uint reads a non-negative integer; msgpack's DecodeUint64 would silently
// wrap a negative one.
func (d *Decoder) uint() (uint64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c >= 0xe0 || (c >= 0xd0 && c <= 0xd3) { // negative fixint, int8..int64
		v, err := d.dec.DecodeInt64()
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, malformed("negative integer %d", v)
		}
		return uint64(v), nil
	}
	return d.dec.DecodeUint64()
}

func (d *Decoder) decode(out *Delta) error {
	fields, err := d.arrayLen(-1, "delta")
	if err != nil {
		return err
	}
	if fields < 4 {
		return malformed("delta: array of %d elements", fields)
	}
	v, err := d.uint()
	if err != nil {
		return err
	}
	switch {
	case v == EnvelopeVersion || v == ModeVersion || v == InflightVersion:
		if fields != 5 {
			return malformed("version %d delta: array of %d elements", v, fields)
		}
	case v < 1 || v > EnvelopeVersion:
		return fmt.Errorf("%w: %d", ErrDeltaVersion, v)
	case fields != int(v)+3:
		return malformed("version %d delta: array of %d elements", v, fields)
	}
	if _, err := d.arrayLen(4, "sender"); err != nil {
		return err
	}
	names := [3]*string{&out.Sender.Region, &out.Sender.PoP, &out.Sender.Node}
	for _, p := range names {
		b, err := d.str(MaxNameLen, "sender name")
		if err != nil {
			return err
		}
		*p = string(b)
	}
	if out.Sender.Incarnation, err = d.uint(); err != nil {
		return err
	}
	if err := out.Sender.Validate(); err != nil {
		return malformed("%v", err)
	}
	if out.SentAt, err = d.dec.DecodeInt64(); err != nil {
		return err
	}
	out.Epoch = 0
	if v >= 2 {
		if out.Epoch, err = d.uint(); err != nil {
			return err
		}
	}
	switch v {
	case EnvelopeVersion:
		return d.decodeSections(out)
	case ModeVersion:
		return d.decodeModes(out)
	case InflightVersion:
		return d.decodeInflight(out)
	}
	// Versions 1 to 4: counts, then blocks (3 and 4), then memos (4).
	if err := d.decodeCounts(out); err != nil {
		return err
	}
	if v >= BlockVersion {
		if err := d.decodeBlocks(out); err != nil {
			return err
		}
	}
	if v >= MemoVersion {
		return d.decodeMemos(out)
	}
	return nil
}

// decodeCounts reads a counts body (rule groups) into out.Entries, keys
// into d.arena (d.spans).
func (d *Decoder) decodeCounts(out *Delta) error {
	groups, err := d.arrayLen(-1, "groups")
	if err != nil {
		return err
	}
	if groups > maxGroups {
		return malformed("%d rule groups (max %d)", groups, maxGroups)
	}
	for g := 0; g < groups; g++ {
		if _, err := d.arrayLen(3, "group"); err != nil {
			return err
		}
		rule, err := d.ruleName("rule name")
		if err != nil {
			return err
		}
		base, err := d.dec.DecodeInt64()
		if err != nil {
			return err
		}
		n, err := d.items("entries", 3, len(out.Entries))
		if err != nil {
			return err
		}
		for k := 0; k < n; k++ {
			kb, err := d.key("key")
			if err != nil {
				return err
			}
			off, err := d.uint()
			if err != nil {
				return err
			}
			if off > math.MaxInt64 || base > math.MaxInt64-int64(off) {
				return malformed("window offset %d overflows", off)
			}
			cnt, err := d.uint()
			if err != nil {
				return err
			}
			d.spans = append(d.spans, span{off: len(d.arena), n: len(kb)})
			d.arena = append(d.arena, kb...)
			out.Entries = append(out.Entries, Entry{Rule: rule, Window: base + int64(off), Count: cnt})
		}
	}
	return nil
}
