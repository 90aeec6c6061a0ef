package memos

import (
	"errors"
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
	return codec.WriteGroups(enc, ms, rules, func(m *Memo) string { return m.Rule }, 0, nil, 3, func(m *Memo) error {
		return errors.Join(enc.EncodeBytes(m.ID[:]), enc.EncodeInt(m.Until), enc.EncodeUint(uint64(m.Verdict)))
	})
}

// Decode reads a memos section's body and appends its memos to out.
func Decode(r *codec.Reader, out []Memo) ([]Memo, error) {
	groups, err := r.Groups("memo")
	for range groups {
		var rule string
		var n int
		if rule, err = r.Group("memo", 0); err != nil {
			break
		}
		if n, err = r.Items("memos", 3, len(out)); err != nil {
			break
		}
		for range n {
			m := Memo{Rule: rule}
			if err = m.decode(r); err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
	return out, err
}

// decode reads m's ID, Until and Verdict.
func (m *Memo) decode(r *codec.Reader) error {
	idb, err := r.Str(len(ID{}), "memo id")
	if err != nil {
		return err
	}
	if len(idb) != len(ID{}) {
		return codec.Malformed("memo id of %d bytes (want %d)", len(idb), len(ID{}))
	}
	m.ID = ID(idb)
	if m.Until, err = r.Int64(); err != nil {
		return err
	}
	v, err := r.Uint()
	if err != nil {
		return err
	}
	if v&^uint64(verdictAll) != 0 {
		return codec.Malformed("memo verdict %#x", v)
	}
	m.Verdict = Verdict(v)
	return nil
}
