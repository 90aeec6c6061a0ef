package inflight

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire"
	"github.com/geolimit/geolimit/wire/codec"
)

// Section is the in-flight counts' section of the wire format (kind 5): a
// delta's in-flight counts are Section.Items(d).
var Section = wire.Register(wire.Codec[Count]{
	Kind:       5,
	Name:       "inflight",
	MaxItems:   codec.MaxItems,
	ItemBound:  ItemBound,
	GroupBound: codec.GroupBound,
	Rule:       func(c *Count) (string, int) { return c.Rule, len(c.Key) },
	Check:      Check,
	Encode: func(enc *msgpack.Encoder, cs []Count, rules []string, _ bool) error {
		return Encode(enc, cs, rules)
	},
	Decode: func(r *codec.Reader, out []Count, _ bool) ([]Count, error) { return Decode(r, out) },
})
