package pop

import "strconv"

// Fingerprint hashes what replicas of a rule must agree on for their counts
// to mean the same thing: name, windows and their limits, scope and
// partition policy.
// Nodes compare their global rules' fingerprints to detect a rule that
// differs between them (a rule whose window differs shares no counts). It is
// FNV-1a, the same on every node and every version that keeps these fields.
func (r Rule) Fingerprint() uint64 {
	var buf [160]byte // on the stack: heartbeats fingerprint every rule
	b := append(buf[:0], r.Name...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(r.Window), 10)
	b = append(b, 0)
	b = strconv.AppendUint(b, r.Limit, 10)
	b = append(b, 0, byte(r.Scope), byte(r.OnPartition))
	for _, l := range r.More { // nothing for a rule of one window
		b = append(b, 0)
		b = strconv.AppendInt(b, int64(l.Window), 10)
		b = append(b, 0)
		b = strconv.AppendUint(b, l.Limit, 10)
	}
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
