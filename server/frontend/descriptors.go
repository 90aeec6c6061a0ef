package frontend

import (
	"slices"

	"github.com/geolimit/geolimit/config"
)

// Descriptors: the classifier of Envoy's rate limit descriptors. A request
// names a domain and descriptors, each a list of (key, value) entries. The
// rls section maps a domain's descriptor shapes (entry keys in order,
// optionally a fixed value) to rules; the values of a matching descriptor's
// entries, as a composite key (ComposeKey; one entry: its value), are the
// key counted, less the entries that name the tier and the idempotency key.
// A descriptor matching no shape, or of an unknown domain, is not limited
// (as with envoyproxy/ratelimit).

// Entry is a descriptor entry: Envoy's RateLimitDescriptor_Entry, read
// through its getters (this package links no protocol buffers).
type Entry interface {
	GetKey() string
	GetValue() string
}

// Domain holds one rls domain's descriptor shapes. Read only.
type Domain struct {
	// shapes maps the entry keys of a descriptor, joined by NUL, to the
	// shapes with those keys, the most specific first: at the first
	// position where two differ, the one with a fixed value wins.
	shapes map[string][]*shape
}

// shape is one descriptor shape of the rls section and its rule.
type shape struct {
	entries []config.RLSEntry
	rule    *Rule
	// tier is the index of the entry that names the tier (rls descriptor
	// field tier), left out of the key; -1 for none.
	tier int
	// idem is the index of the entry that carries the idempotency key (rls
	// descriptor field idempotency_key), left out of the key; -1 for none.
	idem int
}

// compileDomains compiles a validated rls section against the rules.
func compileDomains(c config.RLS, byName map[string]*Rule) map[string]*Domain {
	out := make(map[string]*Domain, len(c.Domains))
	for _, d := range c.Domains {
		dom := &Domain{shapes: map[string][]*shape{}}
		for _, ds := range d.Descriptors {
			cr := byName[ds.Rule]
			if cr == nil {
				continue // refused by config validation
			}
			sh := &shape{rule: cr, tier: -1, idem: -1}
			var sig []byte
			for i, e := range ds.Entries {
				pe, err := config.ParseRLSEntry(e)
				if err != nil {
					continue // refused by config validation
				}
				if ds.Tier != "" && pe.Key == ds.Tier {
					sh.tier = i
				}
				if ds.IdempotencyKey != "" && pe.Key == ds.IdempotencyKey {
					sh.idem = i
				}
				sh.entries = append(sh.entries, pe)
				if i > 0 {
					sig = append(sig, 0)
				}
				sig = append(sig, pe.Key...)
			}
			dom.shapes[string(sig)] = append(dom.shapes[string(sig)], sh)
		}
		for _, list := range dom.shapes {
			slices.SortStableFunc(list, func(a, b *shape) int {
				for i := range a.entries {
					if fa, fb := a.entries[i].Value != "", b.entries[i].Value != ""; fa != fb {
						if fa {
							return -1
						}
						return 1
					}
				}
				return 0
			})
		}
		out[d.Domain] = dom
	}
	return out
}

// DescriptorScratch is scratch space for ClassifyDescriptor, reused
// across the descriptors of a request. Not safe for concurrent use.
type DescriptorScratch struct {
	sig  []byte
	vals []string
}

// Reset drops what the scratch holds of a request (its strings) and an
// oversized buffer.
func (sc *DescriptorScratch) Reset() {
	clear(sc.vals[:cap(sc.vals)])
	if cap(sc.sig) > 1<<16 {
		sc.sig = nil
	}
}

// Descriptor is a classified descriptor: its rule, the value of its key
// (as Checks.Add takes it), its tier and its idempotency key.
type Descriptor struct {
	Rule              *Rule
	Value, Tier, Idem string
}

// ClassifyDescriptor matches a descriptor's entries against the domain's
// shapes; ok is false when none matches (the descriptor is not limited).
// The caller adds the check (Checks.Add) with the cost its protocol names.
func ClassifyDescriptor[E Entry](d *Domain, entries []E, sc *DescriptorScratch) (Descriptor, bool) {
	b := sc.sig[:0]
	for i, e := range entries {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, e.GetKey()...)
	}
	sc.sig = b
	for _, sh := range d.shapes[string(b)] {
		if matches(sh, entries) {
			out := Descriptor{Rule: sh.rule, Value: descriptorValue(entries, sh.tier, sh.idem, sc)}
			if sh.tier >= 0 {
				out.Tier = entries[sh.tier].GetValue()
			}
			if sh.idem >= 0 {
				out.Idem = entries[sh.idem].GetValue()
			}
			return out, true
		}
	}
	return Descriptor{}, false
}

// matches reports whether entries have the shape's keys in order, a
// non-empty value each, and the shape's fixed values.
func matches[E Entry](sh *shape, entries []E) bool {
	if len(entries) != len(sh.entries) {
		return false
	}
	for i, e := range entries {
		want := sh.entries[i]
		if e.GetKey() != want.Key || e.GetValue() == "" || (want.Value != "" && e.GetValue() != want.Value) {
			return false
		}
	}
	return true
}

// descriptorValue is the value of a matching descriptor's key: its values
// as a composite key (ComposeKey; one value as it is), the tier entry's
// and the idempotency key entry's (indexes tier and idem, -1 for none) left
// out.
func descriptorValue[E Entry](entries []E, tier, idem int, sc *DescriptorScratch) string {
	switch {
	case len(entries) == 1:
		return entries[0].GetValue()
	case len(entries) == 2 && (tier >= 0) != (idem >= 0):
		return entries[1-max(tier, idem)].GetValue()
	case len(entries) == 3 && tier >= 0 && idem >= 0:
		return entries[3-tier-idem].GetValue()
	}
	v := sc.vals[:0]
	for i, e := range entries {
		if i != tier && i != idem {
			v = append(v, e.GetValue())
		}
	}
	sc.vals = v
	if len(v) == 1 {
		return v[0]
	}
	return ComposeKey(v)
}
