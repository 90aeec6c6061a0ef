package crdt

import (
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
// (the rules of entries, in order).
func EncodeCounts(enc *msgpack.Encoder, entries []Entry, rules []string) error {
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

// DecodeCounts reads a counts section's body and appends its entries to
// out.
func DecodeCounts(r *codec.Reader, out []Entry) ([]Entry, error) {
	groups, err := r.ArrayLen(-1, "groups")
	if err != nil {
		return out, err
	}
	if groups > codec.MaxGroups {
		return out, codec.Malformed("%d rule groups (max %d)", groups, codec.MaxGroups)
	}
	for range groups {
		if _, err := r.ArrayLen(3, "group"); err != nil {
			return out, err
		}
		rule, err := r.RuleName("rule name")
		if err != nil {
			return out, err
		}
		base, err := r.Int64()
		if err != nil {
			return out, err
		}
		n, err := r.Items("entries", 3, len(out))
		if err != nil {
			return out, err
		}
		for range n {
			kb, err := r.Key("key")
			if err != nil {
				return out, err
			}
			key := r.Keep(kb)
			off, err := r.Uint()
			if err != nil {
				return out, err
			}
			if off > math.MaxInt64 || base > math.MaxInt64-int64(off) {
				return out, codec.Malformed("window offset %d overflows", off)
			}
			cnt, err := r.Uint()
			if err != nil {
				return out, err
			}
			out = append(out, Entry{Rule: rule, Key: key, Window: base + int64(off), Count: cnt})
		}
	}
	return out, nil
}
