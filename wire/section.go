package wire

import (
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/wire/codec"
)

// A replicated feature's section is a registration: the package that owns
// the feature's state declares, once, the kind its items travel under and
// how they are checked, written and read,
//
//	var Section = wire.Register(wire.Codec[Block]{Kind: 2, Name: "blocks", ...})
//
// and reads and writes a delta's items through the handle it gets back
// (Section.Items(d), Section.Set(d, items)). Encode writes the registered
// sections after the counts, in the order of their kinds; Decode reads the
// kinds registered in the binary and skips the others. This package knows
// no feature beside the counts: a new feature is a new registration.
//
// The counts (crdt entries) stay the first section and Delta's one field
// of items (Entries), because every flush and every apply of the hot path
// carries them: reaching them costs no look-up and no type assertion.

// MaxRegistered is the most section kinds beside the counts one binary may
// register (a delta keeps one slot for each).
const MaxRegistered = 8

// Codec says how the items of one section kind travel. The functions are
// the owning package's; Encode and Decode are given the items of one
// section at a time. Items are grouped by rule on the wire when Rule is set
// (each section then names each of its rules once).
type Codec[T any] struct {
	// Kind is the section kind; never 0, never the counts' kind, never
	// another registration's kind, never reused for another shape.
	Kind SectionKind
	// Name names the kind in errors and logs.
	Name string
	// AltKind, when not 0, is a second kind the items for which Alt returns
	// true travel under, in sections of their own after those of Kind
	// (rules' modes: signed ones are a kind of their own). AltName names it.
	AltKind SectionKind
	AltName string
	Alt     func(*T) bool
	// MaxItems is the most items one section may carry.
	MaxItems int
	// ItemBound bounds one encoded item's size beyond its key; GroupBound
	// bounds a rule group's size beyond its items (0 when items are not
	// grouped by rule).
	ItemBound, GroupBound int
	// Rule returns an item's rule and key length, for grouping and for
	// bounding a section's size; nil when items are neither grouped nor
	// keyed (each is then ItemBound at most).
	Rule func(*T) (rule string, keyLen int)
	// Check returns an error for an item that cannot be encoded.
	Check func(*T) error
	// Encode writes one section's body: items, whose rules are rules (in
	// order; nil when Rule is nil). alt: a section of AltKind.
	Encode func(enc *msgpack.Encoder, items []T, rules []string, alt bool) error
	// Decode reads one section's body, appending its items to out. Hostile
	// input returns an error (see Decoder.Decode).
	Decode func(r *codec.Reader, out []T, alt bool) ([]T, error)
}

// Section is the handle of a registered section kind: what a package reads
// and writes a delta's items of that kind through. Its methods are safe
// for concurrent use on distinct deltas.
type Section[T any] struct {
	c    Codec[T]
	slot int
}

// section is what the envelope codec knows of a registration, without
// its item type.
type section interface {
	kinds() (SectionKind, SectionKind)
	names() (string, string)
	check(d *Delta) error
	encode(w *msgWriter, d *Delta) error
	decode(r *codec.Reader, d *Delta, alt bool) error
	count(d *Delta) int
	bytes(d *Delta) int
	appendItems(d, from *Delta)
}

// slot holds a delta's items of one registered kind: the first n of the
// []T items boxes (its storage is reused when the delta is decoded into
// again).
type slot struct {
	items any
	n     int
}

// registry is the registered sections in the order of their kinds, set up
// by the owning packages' initialization and read-only after it.
var registry []section

// Register registers the section kind c describes and returns its handle.
// It is called once per kind, from a package-level variable of the
// package that owns the feature; it panics on a malformed or duplicate
// registration (a programming error, found by any test of the binary).
func Register[T any](c Codec[T]) *Section[T] {
	switch {
	case c.Kind == 0 || c.Kind == SectionCounts || c.Name == "":
		panic(fmt.Sprintf("wire: register %q: kind %d is reserved or unnamed", c.Name, c.Kind))
	case (c.AltKind != 0) != (c.Alt != nil) || (c.AltKind != 0 && (c.AltKind == SectionCounts || c.AltKind == c.Kind || c.AltName == "")):
		panic(fmt.Sprintf("wire: register %q: AltKind, AltName and Alt go together, on a kind of their own", c.Name))
	case c.MaxItems <= 0 || c.ItemBound <= 0 || c.Check == nil || c.Encode == nil || c.Decode == nil:
		panic(fmt.Sprintf("wire: register %q: MaxItems, ItemBound, Check, Encode and Decode are required", c.Name))
	case len(registry) == MaxRegistered:
		panic(fmt.Sprintf("wire: register %q: more than %d section kinds", c.Name, MaxRegistered))
	}
	for _, s := range registry {
		k, alt := s.kinds()
		if c.Kind == k || c.Kind == alt || (c.AltKind != 0 && (c.AltKind == k || c.AltKind == alt)) {
			n, _ := s.names()
			panic(fmt.Sprintf("wire: register %q: kind taken by %q", c.Name, n))
		}
	}
	s := &Section[T]{c: c, slot: len(registry)}
	registry = append(registry, s)
	slices.SortStableFunc(registry, func(a, b section) int {
		ka, _ := a.kinds()
		kb, _ := b.kinds()
		return int(ka) - int(kb)
	})
	return s
}

// Kind returns the section's kind.
func (s *Section[T]) Kind() SectionKind { return s.c.Kind }

// Items returns d's items of this kind (nil when it has none). The slice
// is d's: it is valid until d is changed or decoded into again.
func (s *Section[T]) Items(d *Delta) []T {
	sl := &d.sections[s.slot]
	if sl.n == 0 {
		return nil
	}
	return sl.items.([]T)[:sl.n]
}

// Len returns how many items of this kind d carries.
func (s *Section[T]) Len(d *Delta) int { return len(s.Items(d)) }

// Set makes items d's items of this kind (none when items is empty).
func (s *Section[T]) Set(d *Delta, items []T) {
	if len(items) == 0 {
		d.sections[s.slot] = slot{}
		return
	}
	s.keep(d, items)
}

// keep makes items, not empty, d's items of this kind, reusing the slot's
// boxed slice when items is it, grown in place (so that appending to d's
// items or decoding into d again allocates no new box).
func (s *Section[T]) keep(d *Delta, items []T) {
	sl := &d.sections[s.slot]
	if old, _ := sl.items.([]T); cap(old) == cap(items) && cap(old) > 0 && &old[:1][0] == &items[:1][0] {
		sl.n = len(items)
		return
	}
	sl.items, sl.n = items, len(items)
}

// With sets d's items of this kind to items and returns d, for building a
// delta in one expression.
func (s *Section[T]) With(d *Delta, items ...T) *Delta {
	s.Set(d, items)
	return d
}

// Append adds items to d's items of this kind.
func (s *Section[T]) Append(d *Delta, items ...T) {
	if len(items) > 0 {
		s.Set(d, append(s.Items(d), items...))
	}
}

func (s *Section[T]) kinds() (SectionKind, SectionKind) { return s.c.Kind, s.c.AltKind }
func (s *Section[T]) names() (string, string)           { return s.c.Name, s.c.AltName }
func (s *Section[T]) count(d *Delta) int                { return s.Len(d) }

func (s *Section[T]) appendItems(d, from *Delta) {
	if items := s.Items(from); len(items) > 0 {
		s.keep(d, append(s.Items(d), items...))
	}
}

func (s *Section[T]) bytes(d *Delta) int {
	items := s.Items(d)
	n := len(items) * s.c.ItemBound
	if s.c.Rule != nil {
		for i := range items {
			_, k := s.c.Rule(&items[i])
			n += k
		}
	}
	return n
}

func (s *Section[T]) check(d *Delta) error {
	items := s.Items(d)
	for i := range items {
		if err := s.c.Check(&items[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Section[T]) decode(r *codec.Reader, d *Delta, alt bool) error {
	sl := &d.sections[s.slot]
	items, _ := sl.items.([]T)
	items, err := s.c.Decode(r, items[:sl.n], alt)
	if len(items) > 0 {
		s.keep(d, items)
	}
	return err
}

// encode adds d's items of this kind as sections: those of Kind, then
// those of AltKind.
func (s *Section[T]) encode(w *msgWriter, d *Delta) error {
	items := s.Items(d)
	if len(items) == 0 {
		return nil
	}
	if s.c.Alt == nil {
		return s.encodeKind(w, s.c.Kind, items, false)
	}
	var main, alt []T
	for i := range items {
		if s.c.Alt(&items[i]) {
			alt = append(alt, items[i])
		} else {
			main = append(main, items[i])
		}
	}
	if err := s.encodeKind(w, s.c.Kind, main, false); err != nil {
		return err
	}
	return s.encodeKind(w, s.c.AltKind, alt, true)
}

func (s *Section[T]) encodeKind(w *msgWriter, kind SectionKind, items []T, alt bool) error {
	at := func(int) (string, int) { return "", 0 }
	if s.c.Rule != nil {
		at = func(i int) (string, int) { return s.c.Rule(&items[i]) }
	}
	return w.items(kind, len(items), s.c.MaxItems, at, s.c.ItemBound, s.c.GroupBound,
		func(enc *msgpack.Encoder, lo, hi int, rules []string) error {
			return s.c.Encode(enc, items[lo:hi], rules, alt)
		})
}

// registered returns the registration of kind and whether kind is its
// AltKind, or nil.
func registered(kind SectionKind) (section, bool) {
	for _, s := range registry {
		if k, alt := s.kinds(); kind == k {
			return s, false
		} else if alt != 0 && kind == alt {
			return s, true
		}
	}
	return nil, false
}
