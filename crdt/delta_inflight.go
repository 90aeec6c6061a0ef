package crdt

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// InflightVersion is the earlier wire version of a message of in-flight
// counts only, which Decode still reads:
//
//	[6, sender, sentAt, epoch, inflight body]
const InflightVersion = 6

// inflightBound is an upper bound of one encoded in-flight count's size
// beyond its key: the key's string header, the count and the version.
const inflightBound = 3 + 9 + 9

// inflightGroupBound is an upper bound of an in-flight group's size beyond
// its counts.
const inflightGroupBound = 1 + MaxRuleNameLen + 3 + 5

// checkInflight checks what Encode needs of d's in-flight counts.
func checkInflight(d *Delta) error {
	for i := range d.Inflight {
		e := &d.Inflight[i]
		if len(e.Key) == 0 || len(e.Key) > MaxKeyLen {
			return fmt.Errorf("crdt: encode: in-flight key of %d bytes (want 1-%d)", len(e.Key), MaxKeyLen)
		}
		if len(e.Rule) == 0 || len(e.Rule) > MaxRuleNameLen {
			return fmt.Errorf("crdt: encode: in-flight rule name of %d bytes (want 1-%d)", len(e.Rule), MaxRuleNameLen)
		}
	}
	return nil
}

// encodeInflight writes an in-flight section's body: counts grouped by
// rule.
func encodeInflight(enc *msgpack.Encoder, fl []Inflight, rules []string) error {
	var err error
	put := func(e error) {
		if err == nil {
			err = e
		}
	}
	put(enc.EncodeArrayLen(len(rules)))
	for _, r := range rules {
		n := 0
		for i := range fl {
			if fl[i].Rule == r {
				n++
			}
		}
		put(enc.EncodeArrayLen(2))
		put(enc.EncodeString(r))
		put(enc.EncodeArrayLen(3 * n))
		for i := range fl {
			if e := &fl[i]; e.Rule == r {
				put(enc.EncodeString(e.Key))
				put(enc.EncodeUint(e.Count))
				put(enc.EncodeUint(e.Version))
			}
		}
	}
	return err
}

// decodeInflight reads an in-flight body (groups) into
// out.Inflight, keys into d.arena (d.ispans).
func (d *Decoder) decodeInflight(out *Delta) error {
	groups, err := d.arrayLen(-1, "in-flight groups")
	if err != nil {
		return err
	}
	if groups > maxGroups {
		return malformed("%d in-flight groups (max %d)", groups, maxGroups)
	}
	for g := 0; g < groups; g++ {
		if _, err := d.arrayLen(2, "in-flight group"); err != nil {
			return err
		}
		rule, err := d.ruleName("in-flight rule name")
		if err != nil {
			return err
		}
		n, err := d.items("in-flight counts", 3, len(out.Inflight))
		if err != nil {
			return err
		}
		for k := 0; k < n; k++ {
			kb, err := d.key("in-flight key")
			if err != nil {
				return err
			}
			e := Inflight{Rule: rule}
			if e.Count, err = d.uint(); err != nil {
				return err
			}
			if e.Version, err = d.uint(); err != nil {
				return err
			}
			d.ispans = append(d.ispans, span{off: len(d.arena), n: len(kb)})
			d.arena = append(d.arena, kb...)
			out.Inflight = append(out.Inflight, e)
		}
	}
	return nil
}
