package modes

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire"
)

// Section is the rules' modes' section of the wire format: unsigned writes
// travel as kind 4, signed ones (IsSigned) as kind 6, each in sections of
// their own; a delta's writes of both are Section.Items(d).
var Section = wire.Register(wire.Codec[RuleMode]{
	Kind:      4,
	Name:      "modes",
	AltKind:   6,
	AltName:   "signed modes",
	Alt:       (*RuleMode).IsSigned,
	MaxItems:  MaxPerSection,
	ItemBound: ItemBound,
	Check:     Check,
	Encode: func(enc *msgpack.Encoder, ms []RuleMode, _ []string, signed bool) error {
		return Encode(enc, ms, signed)
	},
	Decode: Decode,
})
