package memos

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire"
	"github.com/geolimit/geolimit/wire/codec"
)

// Section is the memos' section of the wire format (kind 3): a delta's
// memos are Section.Items(d).
var Section = wire.Register(wire.Codec[Memo]{
	Kind:       3,
	Name:       "memos",
	MaxItems:   codec.MaxItems,
	ItemBound:  ItemBound,
	GroupBound: codec.GroupBound,
	Rule:       func(m *Memo) (string, int) { return m.Rule, 0 },
	Check:      Check,
	Encode: func(enc *msgpack.Encoder, ms []Memo, rules []string, _ bool) error {
		return Encode(enc, ms, rules)
	},
	Decode: func(r *codec.Reader, out []Memo, _ bool) ([]Memo, error) { return Decode(r, out) },
})
