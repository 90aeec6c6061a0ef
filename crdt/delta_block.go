package crdt

import (
	"github.com/vmihailenco/msgpack/v5"
)

// blockBound is an upper bound of one encoded block's size beyond its key:
// the key's string header and the time.
const blockBound = 3 + 9

// blockGroupBound is an upper bound of a block group's size beyond its blocks.
const blockGroupBound = 1 + MaxRuleNameLen + 3 + 5

// encodeBlocks writes a blocks section's body: blocks grouped by rule.
func encodeBlocks(enc *msgpack.Encoder, blocks []Block, rules []string) error {
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(len(rules)))
	for _, r := range rules {
		n := 0
		for i := range blocks {
			if blocks[i].Rule == r {
				n++
			}
		}
		put(enc.EncodeArrayLen(2))
		put(enc.EncodeString(r))
		put(enc.EncodeArrayLen(2 * n))
		for i := range blocks {
			if b := &blocks[i]; b.Rule == r {
				put(enc.EncodeString(b.Key))
				put(enc.EncodeInt(b.Until))
			}
		}
	}
	return err
}

// decodeBlocks reads a blocks body (block groups) into out.Blocks, keys
// into d.arena (d.bspans).
func (d *Decoder) decodeBlocks(out *Delta) error {
	groups, err := d.arrayLen(-1, "block groups")
	if err != nil {
		return err
	}
	if groups > maxGroups {
		return malformed("%d block groups (max %d)", groups, maxGroups)
	}
	for g := 0; g < groups; g++ {
		if _, err := d.arrayLen(2, "block group"); err != nil {
			return err
		}
		rule, err := d.ruleName("block rule name")
		if err != nil {
			return err
		}
		n, err := d.items("blocks", 2, len(out.Blocks))
		if err != nil {
			return err
		}
		for k := 0; k < n; k++ {
			kb, err := d.key("block key")
			if err != nil {
				return err
			}
			until, err := d.dec.DecodeInt64()
			if err != nil {
				return err
			}
			d.bspans = append(d.bspans, span{off: len(d.arena), n: len(kb)})
			d.arena = append(d.arena, kb...)
			out.Blocks = append(out.Blocks, Block{Rule: rule, Until: until})
		}
	}
	return nil
}
