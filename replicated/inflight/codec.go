package inflight

import (
	"errors"
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
	return codec.WriteGroups(enc, cs, rules, func(c *Count) string { return c.Rule }, 0, nil, 3, func(c *Count) error {
		return errors.Join(enc.EncodeString(c.Key), enc.EncodeUint(c.Count), enc.EncodeUint(c.Version))
	})
}

// Decode reads an in-flight section's body and appends its counts to out.
func Decode(r *codec.Reader, out []Count) ([]Count, error) {
	groups, err := r.Groups("in-flight")
	for range groups {
		var rule string
		var n int
		if rule, err = r.Group("in-flight", 0); err != nil {
			break
		}
		if n, err = r.Items("in-flight counts", 3, len(out)); err != nil {
			break
		}
		for range n {
			var kb []byte
			if kb, err = r.Key("in-flight key"); err != nil {
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
	return out, err
}
