package blocks

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire"
	"github.com/geolimit/geolimit/wire/codec"
)

// Section is the blocks' section of the wire format (kind 2): a delta's
// blocks are Section.Items(d).
var Section = wire.Register(wire.Codec[Block]{
	Kind:       2,
	Name:       "blocks",
	MaxItems:   codec.MaxItems,
	ItemBound:  ItemBound,
	GroupBound: codec.GroupBound,
	Rule:       func(b *Block) (string, int) { return b.Rule, len(b.Key) },
	Check:      Check,
	Encode: func(enc *msgpack.Encoder, bs []Block, rules []string, _ bool) error {
		return Encode(enc, bs, rules)
	},
	Decode: func(r *codec.Reader, out []Block, _ bool) ([]Block, error) { return Decode(r, out) },
})
