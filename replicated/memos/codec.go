package memos

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire/codec"
)

// The memos section of the wire format: memos grouped by rule, each ID a
// 16-byte binary,
//
//	[[rule, [id, until, verdict, id, until, verdict, ...]], ...]

// ItemBound is an upper bound of one encoded memo's size: the ID (a bin 8
// header and 16 bytes), the time and the verdict.
const ItemBound = 2 + 16 + 9 + 1

// Check returns an error for a memo that cannot be encoded.
func Check(m *Memo) error {
	if len(m.Rule) == 0 || len(m.Rule) > codec.MaxRuleNameLen {
		return fmt.Errorf("memo rule name of %d bytes (want 1-%d)", len(m.Rule), codec.MaxRuleNameLen)
	}
	return nil
}

// Encode writes a memos section's body: ms grouped by rules (the rules of
// ms, in order).
func Encode(enc *msgpack.Encoder, ms []Memo, rules []string) error {
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
		put(enc.EncodeArrayLen(3 * codec.Count(ms, r, func(m *Memo) string { return m.Rule })))
		for i := range ms {
			if m := &ms[i]; m.Rule == r {
				put(enc.EncodeBytes(m.ID[:]))
				put(enc.EncodeInt(m.Until))
				put(enc.EncodeUint(uint64(m.Verdict)))
			}
		}
	}
	return err
}

// Decode reads a memos section's body and appends its memos to out.
func Decode(r *codec.Reader, out []Memo) ([]Memo, error) {
	groups, err := r.ArrayLen(-1, "memo groups")
	if err != nil {
		return out, err
	}
	if groups > codec.MaxGroups {
		return out, codec.Malformed("%d memo groups (max %d)", groups, codec.MaxGroups)
	}
	for range groups {
		if _, err := r.ArrayLen(2, "memo group"); err != nil {
			return out, err
		}
		rule, err := r.RuleName("memo rule name")
		if err != nil {
			return out, err
		}
		n, err := r.Items("memos", 3, len(out))
		if err != nil {
			return out, err
		}
		for range n {
			idb, err := r.Str(len(ID{}), "memo id")
			if err != nil {
				return out, err
			}
			if len(idb) != len(ID{}) {
				return out, codec.Malformed("memo id of %d bytes (want %d)", len(idb), len(ID{}))
			}
			m := Memo{Rule: rule, ID: ID(idb)}
			if m.Until, err = r.Int64(); err != nil {
				return out, err
			}
			v, err := r.Uint()
			if err != nil {
				return out, err
			}
			if v&^uint64(verdictAll) != 0 {
				return out, codec.Malformed("memo verdict %#x", v)
			}
			m.Verdict = Verdict(v)
			out = append(out, m)
		}
	}
	return out, nil
}
