package inflight

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire/codec"
)

// The in-flight section of the wire format: the sender's counts grouped by
// rule,
//
//	[[rule, [key, count, version, key, count, version, ...]], ...]

// ItemBound is an upper bound of one encoded count's size beyond its key:
// the key's string header, the count and the version.
const ItemBound = 3 + 9 + 9

// Check returns an error for a count that cannot be encoded.
func Check(e *Count) error {
	if len(e.Key) == 0 || len(e.Key) > codec.MaxKeyLen {
		return fmt.Errorf("in-flight key of %d bytes (want 1-%d)", len(e.Key), codec.MaxKeyLen)
	}
	if len(e.Rule) == 0 || len(e.Rule) > codec.MaxRuleNameLen {
		return fmt.Errorf("in-flight rule name of %d bytes (want 1-%d)", len(e.Rule), codec.MaxRuleNameLen)
	}
	return nil
}

// Encode writes an in-flight section's body: cs grouped by rules (the
// rules of cs, in order).
func Encode(enc *msgpack.Encoder, cs []Count, rules []string) error {
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(len(rules)))
	for _, r := range rules {
		put(enc.EncodeArrayLen(2))
		put(enc.EncodeString(r))
		put(enc.EncodeArrayLen(3 * codec.Count(cs, r, func(c *Count) string { return c.Rule })))
		for i := range cs {
			if e := &cs[i]; e.Rule == r {
				put(enc.EncodeString(e.Key))
				put(enc.EncodeUint(e.Count))
				put(enc.EncodeUint(e.Version))
			}
		}
	}
	return err
}

// Decode reads an in-flight section's body and appends its counts to out.
func Decode(r *codec.Reader, out []Count) ([]Count, error) {
	groups, err := r.ArrayLen(-1, "in-flight groups")
	if err != nil {
		return out, err
	}
	if groups > codec.MaxGroups {
		return out, codec.Malformed("%d in-flight groups (max %d)", groups, codec.MaxGroups)
	}
	for range groups {
		if _, err := r.ArrayLen(2, "in-flight group"); err != nil {
			return out, err
		}
		rule, err := r.RuleName("in-flight rule name")
		if err != nil {
			return out, err
		}
		n, err := r.Items("in-flight counts", 3, len(out))
		if err != nil {
			return out, err
		}
		for range n {
			kb, err := r.Key("in-flight key")
			if err != nil {
				return out, err
			}
			e := Count{Rule: rule, Key: r.Keep(kb)}
			if e.Count, err = r.Uint(); err != nil {
				return out, err
			}
			if e.Version, err = r.Uint(); err != nil {
				return out, err
			}
			out = append(out, e)
		}
	}
	return out, nil
}
