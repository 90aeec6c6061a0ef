package blocks

import (
	"errors"
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
	return codec.WriteGroups(enc, bs, rules, func(b *Block) string { return b.Rule }, 0, nil, 2, func(b *Block) error {
		return errors.Join(enc.EncodeString(b.Key), enc.EncodeInt(b.Until))
	})
}

// Decode reads a blocks section's body and appends its blocks to out.
func Decode(r *codec.Reader, out []Block) ([]Block, error) {
	groups, err := r.Groups("block")
	for range groups {
		var rule string
		var n int
		if rule, err = r.Group("block", 0); err != nil {
			break
		}
		if n, err = r.Items("blocks", 2, len(out)); err != nil {
			break
		}
		for range n {
			var kb []byte
			if kb, err = r.Key("block key"); err != nil {
				return out, err
			}
			b := Block{Rule: rule, Key: r.Keep(kb)}
			if b.Until, err = r.Int64(); err != nil {
				return out, err
			}
			out = append(out, b)
		}
	}
	return out, err
}
