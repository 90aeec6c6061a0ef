// Package codec holds what every section codec of the replication wire
// format shares: the caps on names and keys, a Reader that decodes hostile
// msgpack without allocating by a length the input chooses, and Fit, which
// cuts a list of items into sections of a bounded size. It knows no section
// kind; the packages that own replicated state (crdt's counts, blocks,
// memos, modes, in-flight counts) write and read their own sections with
// it, and package wire puts sections in envelopes.
//
//	var r codec.Reader
//	r.Reset(body)
//	n, err := r.Items("blocks", 2, 0)
//	for range n {
//		key, err := r.Key("block key")
//		until, err := r.Int64()
//		blocks = append(blocks, Block{Key: r.Keep(key), Until: until})
//	}
//
// A Reader is not safe for concurrent use; everything else is.
package codec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Hard caps checked while decoding, before anything is allocated.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 256
	// MaxRuleNameLen is the longest rule name, in bytes.
	MaxRuleNameLen = 64
	// MaxNameLen caps the length in bytes of a region, PoP or node name.
	MaxNameLen = 64
	// MaxItems is the most items of one kind one message may carry.
	MaxItems = 1 << 16
	// MaxGroups is the most rule groups in one section.
	MaxGroups = 1 << 12
)

// ErrMalformed is a message or section that is not what its format says.
var ErrMalformed = errors.New("wire: malformed delta")

// Malformed returns an error wrapping ErrMalformed.
func Malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// Reader reads msgpack values from a byte slice with every length checked
// against the caps and the bytes left before anything is allocated. Strings
// a section keeps (Keep) share one allocation per message.
type Reader struct {
	rd    bytes.Reader
	dec   *msgpack.Decoder
	arena []byte
	tmp   [MaxKeyLen]byte
}

// Reset starts reading b. Strings kept from the previous message stay
// valid.
func (r *Reader) Reset(b []byte) {
	r.rd.Reset(b)
	if r.dec == nil {
		r.dec = msgpack.NewDecoder(&r.rd)
	} else {
		r.dec.Reset(&r.rd)
	}
	r.arena = nil
}

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return r.rd.Len() }

// Skip skips n bytes (n <= Len()).
func (r *Reader) Skip(n int) error {
	_, err := r.rd.Seek(int64(n), io.SeekCurrent)
	return err
}

// PeekCode returns the msgpack code of the next value without reading it.
func (r *Reader) PeekCode() (byte, error) { return r.dec.PeekCode() }

// BytesLen reads the header of a string or binary and returns its length.
func (r *Reader) BytesLen() (int, error) { return r.dec.DecodeBytesLen() }

// ArrayLen reads an array header: of want elements, or any number when
// want < 0, but never more than the bytes left (every element takes one).
func (r *Reader) ArrayLen(want int, what string) (int, error) { return r.arrayLen(want, what, "") }

// arrayLen is ArrayLen of what named what+suffix in errors (joined only
// then: the names are built on the error path, never per read).
func (r *Reader) arrayLen(want int, what, suffix string) (int, error) {
	n, err := r.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 0 || (want >= 0 && n != want) {
		return 0, Malformed("%s%s: array of %d elements", what, suffix, n)
	}
	if n > r.rd.Len() {
		return 0, Malformed("%s%s: %d elements but %d bytes left", what, suffix, n, r.rd.Len())
	}
	return n, nil
}

// Items reads the array of a group's items, each of per elements, and
// returns how many items it holds: refused unless the elements make whole
// items and the message's items of the kind (have before it) stay within
// MaxItems.
func (r *Reader) Items(what string, per, have int) (int, error) {
	n, err := r.ArrayLen(-1, what)
	if err != nil {
		return 0, err
	}
	if n%per != 0 {
		return 0, Malformed("%s: %d elements, not a multiple of %d", what, n, per)
	}
	if have+n/per > MaxItems {
		return 0, Malformed("more than %d %s", MaxItems, what)
	}
	return n / per, nil
}

// Str reads a string or binary of at most max bytes. The bytes are valid
// until the next read.
func (r *Reader) Str(max int, what string) ([]byte, error) {
	n, err := r.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > max || n > len(r.tmp) {
		return nil, Malformed("%s of %d bytes (max %d)", what, n, max)
	}
	if n > r.rd.Len() {
		return nil, Malformed("%s: truncated", what)
	}
	buf := r.tmp[:n]
	if err := r.dec.ReadFull(buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// Key reads a key: 1 to MaxKeyLen bytes, valid until the next read.
func (r *Reader) Key(what string) ([]byte, error) {
	kb, err := r.Str(MaxKeyLen, what)
	if err != nil {
		return nil, err
	}
	if len(kb) == 0 {
		return nil, Malformed("empty %s", what)
	}
	return kb, nil
}

// RuleName reads a rule's name: 1 to MaxRuleNameLen bytes.
func (r *Reader) RuleName(what string) (string, error) {
	rb, err := r.Str(MaxRuleNameLen, what)
	if err != nil {
		return "", err
	}
	if len(rb) == 0 {
		return "", Malformed("empty %s", what)
	}
	return string(rb), nil
}

// Name reads a region, PoP or node name (at most MaxNameLen bytes; its
// validity is the caller's to check).
func (r *Reader) Name(what string) (string, error) {
	b, err := r.Str(MaxNameLen, what)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Keep returns b as a string that shares one allocation with the other
// strings kept from the same message: a message's keys take one allocation
// between them, not one each.
func (r *Reader) Keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(r.arena)-len(r.arena) < len(b) {
		// What is left of the message bounds what is still to be kept.
		r.arena = make([]byte, 0, max(len(b), r.rd.Len()+len(b)))
	}
	off := len(r.arena)
	r.arena = append(r.arena, b...)
	return unsafe.String(&r.arena[off], len(b))
}

// Uint reads a non-negative integer; msgpack's DecodeUint64 would silently
// wrap a negative one.
func (r *Reader) Uint() (uint64, error) {
	c, err := r.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c >= 0xe0 || (c >= 0xd0 && c <= 0xd3) { // negative fixint, int8..int64
		v, err := r.dec.DecodeInt64()
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, Malformed("negative integer %d", v)
		}
		return uint64(v), nil
	}
	return r.dec.DecodeUint64()
}

// Int64 reads an integer.
func (r *Reader) Int64() (int64, error) { return r.dec.DecodeInt64() }

// Fit returns how many of the first n items (item i of rule and key length
// at(i)) fit in maxBytes after size bytes, at their worst-case sizes: the
// key plus itemBound for each, and groupBound once per rule; and those
// rules, in order of first use. It takes at most MaxItems items.
func Fit(n int, at func(i int) (rule string, keyLen int), size, itemBound, groupBound, maxBytes int) (int, []string) {
	var rules []string
	k := 0
	for ; k < n && k < MaxItems; k++ {
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

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// GroupBound is an upper bound of a rule group's size beyond its items:
// its array header, the rule's name and the items' array header.
const GroupBound = 1 + MaxRuleNameLen + 3 + 5

// Groups reads the header of a section body of rule groups,
//
//	[[rule, head..., [item, item, ...]], ...]
//
// and returns how many groups it holds; each is then read by Group, its
// heads, and Items (what names them in errors).
func (r *Reader) Groups(what string) (int, error) {
	groups, err := r.arrayLen(-1, what, " groups")
	if err != nil {
		return 0, err
	}
	if groups > MaxGroups {
		return 0, Malformed("%d %s groups (max %d)", groups, what, MaxGroups)
	}
	return groups, nil
}

// Group reads the start of one group of Groups: its array of 2+heads
// elements and its rule's name. The heads, then the items' array (Items),
// follow.
func (r *Reader) Group(what string, heads int) (string, error) {
	if _, err := r.arrayLen(2+heads, what, " group"); err != nil {
		return "", err
	}
	rb, err := r.Str(MaxRuleNameLen, "rule name")
	if err != nil {
		return "", err
	}
	if len(rb) == 0 {
		return "", Malformed("empty %s rule name", what)
	}
	return string(rb), nil
}

// WriteGroups writes a section body of rule groups (Groups) of items,
// grouped by rules (the rules of items, in order): rule gives an item's
// rule, head (when not nil) writes a group's heads after its rule, and item
// writes an item's per elements.
func WriteGroups[T any](enc *msgpack.Encoder, items []T, rules []string, rule func(*T) string, heads int, head func(rule string) error, per int, item func(*T) error) error {
	err := enc.EncodeArrayLen(len(rules))
	for _, r := range rules {
		if err != nil {
			return err
		}
		n := 0
		for i := range items {
			if rule(&items[i]) == r {
				n++
			}
		}
		err = errors.Join(enc.EncodeArrayLen(2+heads), enc.EncodeString(r))
		if err == nil && head != nil {
			err = head(r)
		}
		if err == nil {
			err = enc.EncodeArrayLen(per * n)
		}
		for i := 0; i < len(items) && err == nil; i++ {
			if rule(&items[i]) == r {
				err = item(&items[i])
			}
		}
	}
	return err
}
