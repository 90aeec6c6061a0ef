package crdt

import (
	"github.com/vmihailenco/msgpack/v5"
)

// memoBound is an upper bound of one encoded memo's size: the ID (a bin 8
// header and 16 bytes), the time and the verdict.
const memoBound = 2 + 16 + 9 + 1

// memoGroupBound is an upper bound of a memo group's size beyond its memos.
const memoGroupBound = 1 + MaxRuleNameLen + 3 + 5

// encodeMemos writes a memos section's body: memos grouped by rule.
func encodeMemos(enc *msgpack.Encoder, memos []Memo, rules []string) error {
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(len(rules)))
	for _, r := range rules {
		n := 0
		for i := range memos {
			if memos[i].Rule == r {
				n++
			}
		}
		put(enc.EncodeArrayLen(2))
		put(enc.EncodeString(r))
		put(enc.EncodeArrayLen(3 * n))
		for i := range memos {
			if m := &memos[i]; m.Rule == r {
				put(enc.EncodeBytes(m.ID[:]))
				put(enc.EncodeInt(m.Until))
				put(enc.EncodeUint(uint64(m.Verdict)))
			}
		}
	}
	return err
}

// decodeMemos reads a memos body (memo groups) into out.Memos.
func (d *Decoder) decodeMemos(out *Delta) error {
	groups, err := d.arrayLen(-1, "memo groups")
	if err != nil {
		return err
	}
	if groups > maxGroups {
		return malformed("%d memo groups (max %d)", groups, maxGroups)
	}
	for g := 0; g < groups; g++ {
		if _, err := d.arrayLen(2, "memo group"); err != nil {
			return err
		}
		rule, err := d.ruleName("memo rule name")
		if err != nil {
			return err
		}
		n, err := d.items("memos", 3, len(out.Memos))
		if err != nil {
			return err
		}
		for k := 0; k < n; k++ {
			idb, err := d.str(len(MemoID{}), "memo id")
			if err != nil {
				return err
			}
			if len(idb) != len(MemoID{}) {
				return malformed("memo id of %d bytes (want %d)", len(idb), len(MemoID{}))
			}
			m := Memo{Rule: rule, ID: MemoID(idb)}
			if m.Until, err = d.dec.DecodeInt64(); err != nil {
				return err
			}
			v, err := d.uint()
			if err != nil {
				return err
			}
			if v&^uint64(verdictAll) != 0 {
				return malformed("memo verdict %#x", v)
			}
			m.Verdict = Verdict(v)
			out.Memos = append(out.Memos, m)
		}
	}
	return nil
}
