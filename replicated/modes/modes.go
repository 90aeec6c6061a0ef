// Package modes is the replicated state of the kill switch: each rule's
// mode as set at run time, a last-writer-wins register per rule name, and
// its section of the wire format.
package modes

import (
	"cmp"
	"crypto/ed25519"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire/codec"
)

// RuleMode is a rule's mode as set at run time (the kill switch), a
// last-writer-wins register per rule name: of two writes the one with the
// later At wins, then the greater writer By, then the greater Mode, so
// every replica that holds the same writes holds the same winner, whatever
// order they arrived in.
type RuleMode struct {
	// Rule is the rule's name (1 to codec.MaxRuleNameLen bytes).
	Rule string
	// Mode is the mode set: Config (the override is cleared: the rule
	// file's mode applies), Enforce, Shadow or Off.
	Mode uint8
	// At is the write's time (Unix nanoseconds) on the writer's hybrid
	// logical clock: never earlier than any write the writer had seen.
	At int64
	// By is the node that set it.
	By identity.Replica
	// Sig is the write's Ed25519 signature by a mode authority key (see
	// Authority); all zero when unsigned.
	Sig [ed25519.SignatureSize]byte
}

// IsSigned reports whether m carries a signature.
func (m *RuleMode) IsSigned() bool { return m.Sig != [ed25519.SignatureSize]byte{} }

// Modes of a RuleMode.
const (
	Config uint8 = iota
	Enforce
	Shadow
	Off
	maxMode = Off
)

// Compare orders two writes of one rule: negative when a is older
// than b, 0 when they are the same write, positive when a is newer.
func Compare(a, b RuleMode) int {
	if c := cmp.Compare(a.At, b.At); c != 0 {
		return c
	}
	if c := identity.CompareReplicas(a.By, b.By); c != 0 {
		return c
	}
	return cmp.Compare(a.Mode, b.Mode)
}

// Merge merges two writes of one rule: the newer one wins. It is
// commutative, associative and idempotent.
func Merge(a, b RuleMode) RuleMode {
	if Compare(a, b) >= 0 {
		return a
	}
	return b
}

// The modes sections of the wire format: every write's fields, flat; the
// unsigned writes in one kind of section, the signed ones in another,
//
//	[rule, mode, at, region, pop, node, incarnation, ...]
//	[rule, mode, at, region, pop, node, incarnation, sig, ...]

// fields is the number of elements of one encoded unsigned RuleMode.
const fields = 7

// ItemBound is an upper bound of one encoded RuleMode's size: the rule
// name, the mode, the time, the writer and a signature.
const ItemBound = 2 + codec.MaxRuleNameLen + 1 + 9 + 3*(codec.MaxNameLen+3) + 9 + 2 + ed25519.SignatureSize

// MaxPerSection is the most rule modes one section may carry.
const MaxPerSection = crdt.MaxRules

// Check returns an error for a write that cannot be encoded.
func Check(m *RuleMode) error {
	if len(m.Rule) == 0 || len(m.Rule) > codec.MaxRuleNameLen {
		return fmt.Errorf("mode rule name of %d bytes (want 1-%d)", len(m.Rule), codec.MaxRuleNameLen)
	}
	if m.Mode > maxMode {
		return fmt.Errorf("rule %q: mode %d", m.Rule, m.Mode)
	}
	if err := m.By.Validate(); err != nil {
		return fmt.Errorf("rule %q: set by: %w", m.Rule, err)
	}
	return nil
}

// Encode writes a modes section's body: of unsigned writes, or with
// signed, of signed ones (ms must be all one or all the other).
func Encode(enc *msgpack.Encoder, ms []RuleMode, signed bool) error {
	per := fields
	if signed {
		per++
	}
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(per * len(ms)))
	for _, m := range ms {
		put(enc.EncodeString(m.Rule))
		put(enc.EncodeUint(uint64(m.Mode)))
		put(enc.EncodeInt(m.At))
		put(enc.EncodeString(m.By.Region))
		put(enc.EncodeString(m.By.PoP))
		put(enc.EncodeString(m.By.Node))
		put(enc.EncodeUint(m.By.Incarnation))
		if signed {
			put(enc.EncodeBytes(m.Sig[:]))
		}
	}
	return err
}

// Decode reads a modes section's body (of signed writes, with signed) and
// appends its writes to out.
func Decode(r *codec.Reader, out []RuleMode, signed bool) ([]RuleMode, error) {
	per := fields
	if signed {
		per++
	}
	n, err := r.Items("modes", per, 0)
	if err != nil {
		return out, err
	}
	if n > MaxPerSection {
		return out, codec.Malformed("%d modes (max %d)", n, MaxPerSection)
	}
	for range n {
		var m RuleMode
		if m.Rule, err = r.RuleName("mode rule name"); err != nil {
			return out, err
		}
		v, err := r.Uint()
		if err != nil {
			return out, err
		}
		if v > uint64(maxMode) {
			return out, codec.Malformed("rule %q: mode %d", m.Rule, v)
		}
		m.Mode = uint8(v)
		if m.At, err = r.Int64(); err != nil {
			return out, err
		}
		for _, p := range [3]*string{&m.By.Region, &m.By.PoP, &m.By.Node} {
			if *p, err = r.Name("mode writer name"); err != nil {
				return out, err
			}
		}
		if m.By.Incarnation, err = r.Uint(); err != nil {
			return out, err
		}
		if err := m.By.Validate(); err != nil {
			return out, codec.Malformed("rule %q: set by: %v", m.Rule, err)
		}
		if signed {
			sig, err := r.Str(ed25519.SignatureSize, "mode signature")
			if err != nil {
				return out, err
			}
			if len(sig) != ed25519.SignatureSize || [ed25519.SignatureSize]byte(sig) == [ed25519.SignatureSize]byte{} {
				return out, codec.Malformed("rule %q: signature of %d bytes", m.Rule, len(sig))
			}
			m.Sig = [ed25519.SignatureSize]byte(sig)
		}
		out = append(out, m)
	}
	return out, nil
}
