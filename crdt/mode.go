package crdt

import (
	"cmp"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// RuleMode is a rule's mode as set at run time (the kill switch), a
// last-writer-wins register per rule name: of two writes the one with the
// later At wins, then the greater writer By, then the greater Mode, so
// every replica that holds the same writes holds the same winner, whatever
// order they arrived in. Any replica may send any RuleMode it holds.
type RuleMode struct {
	// Rule is the rule's name (1 to MaxRuleNameLen bytes).
	Rule string
	// Mode is the mode set: RuleModeConfig (the override is cleared: the
	// rule file's mode applies), RuleModeEnforce, RuleModeShadow or
	// RuleModeOff.
	Mode uint8
	// At is the writer's clock when it set the mode (Unix nanoseconds).
	At int64
	// By is the node that set it.
	By Replica
}

// Modes of a RuleMode.
const (
	RuleModeConfig uint8 = iota
	RuleModeEnforce
	RuleModeShadow
	RuleModeOff
	maxRuleMode = RuleModeOff
)

// CompareRuleModes orders two writes of one rule: negative when a is older
// than b, 0 when they are the same write, positive when a is newer.
func CompareRuleModes(a, b RuleMode) int {
	if c := cmp.Compare(a.At, b.At); c != 0 {
		return c
	}
	if c := CompareReplicas(a.By, b.By); c != 0 {
		return c
	}
	return cmp.Compare(a.Mode, b.Mode)
}

// MergeRuleMode merges two writes of one rule: the newer one wins. It is
// commutative, associative and idempotent.
func MergeRuleMode(a, b RuleMode) RuleMode {
	if CompareRuleModes(a, b) >= 0 {
		return a
	}
	return b
}

// CompareReplicas orders replicas by region, PoP, node and incarnation.
func CompareReplicas(a, b Replica) int {
	if c := cmp.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PoP, b.PoP); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return cmp.Compare(a.Incarnation, b.Incarnation)
}

// ModeVersion is the earlier wire version of a message of rule modes only,
// which Decode still reads:
//
//	[5, sender, sentAt, epoch, modes body]
const ModeVersion = 5

// modeFields is the number of elements of one encoded RuleMode.
const modeFields = 7

// modeBound is an upper bound of one encoded RuleMode's size: the rule
// name, the mode, the time and the writer.
const modeBound = 2 + MaxRuleNameLen + 1 + 9 + 3*(MaxNameLen+3) + 9

// MaxModes is the most rule modes one message may carry.
const MaxModes = MaxRules

// encodeModes writes a modes section's body: every mode's fields, flat.
func encodeModes(enc *msgpack.Encoder, modes []RuleMode) error {
	for i := range modes {
		m := &modes[i]
		if len(m.Rule) == 0 || len(m.Rule) > MaxRuleNameLen {
			return fmt.Errorf("mode rule name of %d bytes (want 1-%d)", len(m.Rule), MaxRuleNameLen)
		}
		if m.Mode > maxRuleMode {
			return fmt.Errorf("rule %q: mode %d", m.Rule, m.Mode)
		}
		if err := m.By.Validate(); err != nil {
			return fmt.Errorf("rule %q: set by: %w", m.Rule, err)
		}
	}
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(modeFields * len(modes)))
	for _, m := range modes {
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

// decodeModes reads a modes body into out.Modes.
func (d *Decoder) decodeModes(out *Delta) error {
	n, err := d.items("modes", modeFields, 0)
	if err != nil {
		return err
	}
	if n > MaxModes {
		return malformed("%d modes (max %d)", n, MaxModes)
	}
	for k := 0; k < n; k++ {
		var m RuleMode
		if m.Rule, err = d.ruleName("mode rule name"); err != nil {
			return err
		}
		v, err := d.uint()
		if err != nil {
			return err
		}
		if v > uint64(maxRuleMode) {
			return malformed("rule %q: mode %d", m.Rule, v)
		}
		m.Mode = uint8(v)
		if m.At, err = d.dec.DecodeInt64(); err != nil {
			return err
		}
		for _, p := range [3]*string{&m.By.Region, &m.By.PoP, &m.By.Node} {
			b, err := d.str(MaxNameLen, "mode writer name")
			if err != nil {
				return err
			}
			*p = string(b)
		}
		if m.By.Incarnation, err = d.uint(); err != nil {
			return err
		}
		if err := m.By.Validate(); err != nil {
			return malformed("rule %q: set by: %v", m.Rule, err)
		}
		out.Modes = append(out.Modes, m)
	}
	return nil
}
