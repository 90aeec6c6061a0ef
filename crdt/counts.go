package crdt

import (
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire/codec"
)

// Caps on what the store and the wire take, the wire format's own.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = codec.MaxKeyLen
	// MaxRuleNameLen is the longest rule name, in bytes.
	MaxRuleNameLen = codec.MaxRuleNameLen
)

// Entry is one absolute count: the sender's own count of (Rule, Key, Window);
// for a PoP aggregate sender, the PoP total.
type Entry struct {
	Rule   string
	Key    string
	Window int64
	Count  uint64
}

// The counts section of the wire format: entries grouped by rule, each
// group's windows as offsets from its lowest, so an IPv4 key costs about 16
// bytes,
//
//	[[rule, baseWindow, [key, windowOffset, count, ...]], ...]

// EntryBound is an upper bound of one encoded entry's size beyond its key.
const EntryBound = 3 + 9 + 9

// CountsGroupBound is an upper bound of a counts group's size beyond its
// entries (codec.GroupBound and the base window).
const CountsGroupBound = codec.GroupBound + 9

// CheckEntry returns an error for an entry that cannot be encoded.
func CheckEntry(e *Entry) error {
	if len(e.Key) == 0 || len(e.Key) > MaxKeyLen {
		return fmt.Errorf("key of %d bytes (want 1-%d)", len(e.Key), MaxKeyLen)
	}
	if len(e.Rule) == 0 || len(e.Rule) > MaxRuleNameLen {
		return fmt.Errorf("rule name of %d bytes (want 1-%d)", len(e.Rule), MaxRuleNameLen)
	}
	return nil
}

// EncodeCounts writes a counts section's body: entries grouped by rules
// (the rules of entries, in order), each group's windows as offsets from
// its lowest.
func EncodeCounts(enc *msgpack.Encoder, entries []Entry, rules []string) error {
	var base int64
	return codec.WriteGroups(enc, entries, rules, func(e *Entry) string { return e.Rule }, 1, func(rule string) error {
		base = math.MaxInt64
		for i := range entries {
			if entries[i].Rule == rule {
				base = min(base, entries[i].Window)
			}
		}
		return enc.EncodeInt(base)
	}, 3, func(e *Entry) error {
		if e.Window-base < 0 {
			return errors.New("window spread overflows")
		}
		return errors.Join(enc.EncodeString(e.Key), enc.EncodeUint(uint64(e.Window-base)), enc.EncodeUint(e.Count))
	})
}

// DecodeCounts reads a counts section's body and appends its entries to
// out.
func DecodeCounts(r *codec.Reader, out []Entry) ([]Entry, error) {
	groups, err := r.Groups("counts")
	for range groups {
		var rule string
		var base int64
		var n int
		if rule, err = r.Group("counts", 1); err != nil {
			break
		}
		if base, err = r.Int64(); err != nil {
			break
		}
		if n, err = r.Items("entries", 3, len(out)); err != nil {
			break
		}
		for range n {
			var kb []byte
			if kb, err = r.Key("key"); err != nil {
				return out, err
			}
			e := Entry{Rule: rule, Key: r.Keep(kb)}
			var off uint64
			if off, err = r.Uint(); err != nil {
				return out, err
			}
			if off > math.MaxInt64 || base > math.MaxInt64-int64(off) {
				return out, codec.Malformed("window offset %d overflows", off)
			}
			e.Window = base + int64(off)
			if e.Count, err = r.Uint(); err != nil {
				return out, err
			}
			out = append(out, e)
		}
	}
	return out, err
}
