package blocks

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire/codec"
)

// The blocks section of the wire format: blocks grouped by rule,
//
//	[[rule, [key, until, key, until, ...]], ...]

// ItemBound is an upper bound of one encoded block's size beyond its key:
// the key's string header and the time.
const ItemBound = 3 + 9

// Check returns an error for a block that cannot be encoded.
func Check(b *Block) error {
	if len(b.Key) == 0 || len(b.Key) > codec.MaxKeyLen {
		return fmt.Errorf("block key of %d bytes (want 1-%d)", len(b.Key), codec.MaxKeyLen)
	}
	if len(b.Rule) == 0 || len(b.Rule) > codec.MaxRuleNameLen {
		return fmt.Errorf("block rule name of %d bytes (want 1-%d)", len(b.Rule), codec.MaxRuleNameLen)
	}
	return nil
}

// Encode writes a blocks section's body: bs grouped by rules (the rules of
// bs, in order).
func Encode(enc *msgpack.Encoder, bs []Block, rules []string) error {
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
		put(enc.EncodeArrayLen(2 * codec.Count(bs, r, func(b *Block) string { return b.Rule })))
		for i := range bs {
			if b := &bs[i]; b.Rule == r {
				put(enc.EncodeString(b.Key))
				put(enc.EncodeInt(b.Until))
			}
		}
	}
	return err
}

// Decode reads a blocks section's body and appends its blocks to out.
func Decode(r *codec.Reader, out []Block) ([]Block, error) {
	groups, err := r.ArrayLen(-1, "block groups")
	if err != nil {
		return out, err
	}
	if groups > codec.MaxGroups {
		return out, codec.Malformed("%d block groups (max %d)", groups, codec.MaxGroups)
	}
	for range groups {
		if _, err := r.ArrayLen(2, "block group"); err != nil {
			return out, err
		}
		rule, err := r.RuleName("block rule name")
		if err != nil {
			return out, err
		}
		n, err := r.Items("blocks", 2, len(out))
		if err != nil {
			return out, err
		}
		for range n {
			kb, err := r.Key("block key")
			if err != nil {
				return out, err
			}
			key := r.Keep(kb)
			until, err := r.Int64()
			if err != nil {
				return out, err
			}
			out = append(out, Block{Rule: rule, Key: key, Until: until})
		}
	}
	return out, nil
}
