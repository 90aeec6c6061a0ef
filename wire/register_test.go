package wire_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/wire"
	"github.com/geolimit/geolimit/wire/codec"
)

// note is the item of a feature this package does not know: registering
// it is all a new feature needs of the wire format.
type note struct {
	Rule string
	N    uint64
}

// notes is its section, of a kind no other registration takes.
var notes = wire.Register(wire.Codec[note]{
	Kind:      200,
	Name:      "notes",
	MaxItems:  codec.MaxItems,
	ItemBound: 2 + codec.MaxRuleNameLen + 9,
	Check:     func(*note) error { return nil },
	Encode: func(enc *msgpack.Encoder, ns []note, _ []string, _ bool) error {
		if err := enc.EncodeArrayLen(2 * len(ns)); err != nil {
			return err
		}
		for _, n := range ns {
			if err := enc.EncodeString(n.Rule); err != nil {
				return err
			}
			if err := enc.EncodeUint(n.N); err != nil {
				return err
			}
		}
		return nil
	},
	Decode: func(r *codec.Reader, out []note, _ bool) ([]note, error) {
		n, err := r.Items("notes", 2, 0)
		for range n {
			var x note
			if x.Rule, err = r.RuleName("note rule"); err != nil {
				return out, err
			}
			if x.N, err = r.Uint(); err != nil {
				return out, err
			}
			out = append(out, x)
		}
		return out, err
	},
})

// TestRegisteredSectionRoundTrips: a section registered outside this
// package travels after the counts and the other kinds, in the order of
// kinds, and comes back whole; a binary without the registration would
// skip it (TestUnknownSectionsSkipped).
func TestRegisteredSectionRoundTrips(t *testing.T) {
	d := &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "n1", Incarnation: 1}}
	notes.Set(d, []note{{"api", 3}, {"login", 1 << 40}})
	blocks.Section.Set(d, []blocks.Block{{Rule: "login", Key: "k", Until: 9}})
	assert.Equal(t, 3, d.Items())
	assert.Equal(t, 3, d.Sections())
	msgs, err := wire.Encode(d, 0)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, []wire.SectionKind{blocks.Section.Kind(), 200}, sectionKinds(t, msgs[0]))
	assert.Equal(t, "notes", wire.SectionKind(200).String())

	var out wire.Delta
	dec := wire.NewDecoder()
	for range 2 { // the second time into the same delta, reusing its storage
		require.NoError(t, dec.Decode(msgs[0], &out))
		assert.Equal(t, notes.Items(d), notes.Items(&out))
		assert.Equal(t, blocks.Section.Items(d), blocks.Section.Items(&out))
		assert.Zero(t, out.Skipped)
	}
	out.ClearSections()
	assert.Zero(t, out.Items())
	assert.Nil(t, notes.Items(&out))
}

// TestSectionValueSemantics: a copy of a delta keeps its items when the
// original's are set anew, as a copy of a slice field would.
func TestSectionValueSemantics(t *testing.T) {
	var d wire.Delta
	notes.Append(&d, note{"a", 1})
	c := d
	notes.Append(&d, note{"b", 2})
	notes.Set(&d, nil)
	assert.Equal(t, []note{{"a", 1}}, notes.Items(&c))
	assert.Nil(t, notes.Items(&d))
	assert.Equal(t, 1, notes.With(&c, note{"z", 9}).Items())
}

// TestRegisterRefusesClashes: a kind is registered once; the counts' kind
// and 0 are reserved.
func TestRegisterRefusesClashes(t *testing.T) {
	codecOf := func(kind wire.SectionKind) wire.Codec[note] {
		c := wire.Codec[note]{Kind: kind, Name: "clash", MaxItems: 1, ItemBound: 1,
			Check:  func(*note) error { return nil },
			Encode: func(*msgpack.Encoder, []note, []string, bool) error { return nil },
			Decode: func(_ *codec.Reader, out []note, _ bool) ([]note, error) { return out, nil }}
		return c
	}
	for _, kind := range []wire.SectionKind{0, wire.SectionCounts, blocks.Section.Kind(), 200, 6} {
		assert.Panics(t, func() { wire.Register(codecOf(kind)) }, "kind %d", kind)
	}
}
