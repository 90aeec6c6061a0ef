// Package modes is the replicated state of the kill switch: each rule's
// mode as set at run time, a last-writer-wins register per rule name, and
// its section of the wire format.
package modes

import (
	"cmp"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/geolimit/geolimit/crdt"
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
	By crdt.Replica
}

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
	if c := crdt.CompareReplicas(a.By, b.By); c != 0 {
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

// The modes section of the wire format: every mode's fields, flat,
//
//	[rule, mode, at, region, pop, node, incarnation, ...]

// fields is the number of elements of one encoded RuleMode.
const fields = 7

// ItemBound is an upper bound of one encoded RuleMode's size: the rule
// name, the mode, the time and the writer.
const ItemBound = 2 + codec.MaxRuleNameLen + 1 + 9 + 3*(codec.MaxNameLen+3) + 9

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

// Encode writes a modes section's body.
func Encode(enc *msgpack.Encoder, ms []RuleMode) error {
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(fields * len(ms)))
	for _, m := range ms {
		put(enc.EncodeString(m.Rule))
		put(enc.EncodeUint(uint64(m.Mode)))
		put(enc.EncodeInt(m.At))
		put(enc.EncodeString(m.By.Region))
		put(enc.EncodeString(m.By.PoP))
		put(enc.EncodeString(m.By.Node))
		put(enc.EncodeUint(m.By.Incarnation))
	}
	return err
}

// Decode reads a modes section's body and appends its writes to out.
func Decode(r *codec.Reader, out []RuleMode) ([]RuleMode, error) {
	n, err := r.Items("modes", fields, 0)
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
		out = append(out, m)
	}
	return out, nil
}
