package repl

import (
	"slices"
	"sort"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// Drift detection: PoPs that disagree on a global rule, or whose clocks are
// far apart, replicate without error and yet do not limit together (a rule
// whose window differs shares no counts; a clock far ahead counts in windows
// the others have not reached). Heartbeats therefore carry, as control
// entries, one fingerprint per global rule of the sender: Rule the rule's
// name, Key fingerprintKey, Window the rule's window in milliseconds, Count
// pop.Rule.Fingerprint. A node of an older version ignores a heartbeat's
// entries; one of a newer version that gets none reports nothing.
//
// Each side reports what the other has that it does not: a rule of the
// peer's that it lacks or that differs. A heartbeat too large for one message
// is split, and each part is judged on its own, so nothing is concluded from
// a rule's absence in a heartbeat.
//
// The clock offset of a remote PoP (its clock minus this node's) is
// estimated from the heartbeats' SentAt: each gives SentAt - receive time =
// offset - latency, and the largest of the last driftSamples (the one with
// the least latency) is taken. The estimate errs low by that heartbeat's
// one-way latency: below the true offset by at most the smallest one-way
// latency seen, never above it.

// fingerprintKey marks a heartbeat's fingerprint entries.
const fingerprintKey = "fingerprint/1"

// driftSamples is how many heartbeats' offsets a peer's estimate keeps.
const driftSamples = 8

// maxMismatches bounds the mismatches kept per remote PoP.
const maxMismatches = 32

// RuleMismatch is a global rule a remote PoP has that this node does not
// have alike.
type RuleMismatch struct {
	Rule string `json:"rule"`
	// Absent: this node has no global rule of that name; else it differs
	// (window, limit, scope or partition policy).
	Absent bool `json:"absent_here,omitempty"`
	// PeerWindowMS and WindowMS are the rule's window at the peer and here
	// (0: absent).
	PeerWindowMS int64 `json:"peer_window_ms"`
	WindowMS     int64 `json:"window_ms"`
}

// PeerDrift is what a node knows of a remote PoP's rules and clock.
type PeerDrift struct {
	PoPID
	// ClockOffset estimates the PoP's clock minus this node's (see above).
	ClockOffset time.Duration `json:"clock_offset_ns"`
	// Skewed: |ClockOffset| is above the node's max skew (limits.max_skew).
	Skewed bool `json:"skewed"`
	// Mismatches are its global rules this node lacks or has otherwise.
	Mismatches []RuleMismatch `json:"rule_mismatches,omitempty"`
}

// peerDrift is the drift state kept per remote PoP.
type peerDrift struct {
	offsets [driftSamples]int64
	n, next int
	skewed  bool
	mism    []RuleMismatch
}

// fingerprints returns the control entries of this node's global rules.
func (c *Core) fingerprints() []crdt.Entry {
	var out []crdt.Entry
	for _, r := range c.node.Rules() {
		if r.Scope == pop.ScopeGlobal {
			out = append(out, crdt.Entry{Rule: r.Name, Key: fingerprintKey, Window: r.Window.Milliseconds(), Count: r.Fingerprint()})
		}
	}
	return out
}

// checkDrift takes a heartbeat of p: its clock and its rules' fingerprints.
func (c *Core) checkDrift(now int64, p *peer, d *crdt.Delta) {
	dr := &p.drift
	if d.SentAt != 0 {
		dr.offsets[dr.next] = d.SentAt - now
		dr.next = (dr.next + 1) % driftSamples
		dr.n = min(dr.n+1, driftSamples)
	}
	skewed := dr.n > 0 && abs(dr.offset()) > int64(c.node.MaxSkew())
	changed := skewed != dr.skewed
	dr.skewed = skewed
	var mism []RuleMismatch
	seen := false
	for _, e := range d.Entries {
		if e.Key != fingerprintKey {
			continue
		}
		seen = true
		r, ok := c.node.Rule(e.Rule)
		switch {
		case !ok || r.Scope != pop.ScopeGlobal:
			mism = append(mism, RuleMismatch{Rule: e.Rule, Absent: true, PeerWindowMS: e.Window})
		case r.Fingerprint() != e.Count:
			mism = append(mism, RuleMismatch{Rule: e.Rule, PeerWindowMS: e.Window, WindowMS: r.Window.Milliseconds()})
		}
		if len(mism) >= maxMismatches {
			break
		}
	}
	if seen {
		sort.Slice(mism, func(i, j int) bool { return mism[i].Rule < mism[j].Rule })
		if !slices.Equal(mism, dr.mism) {
			dr.mism = mism
			changed = true
		}
	}
	if changed {
		c.driftVersion++
	}
}

// offset is the estimate: the largest sample kept.
func (dr *peerDrift) offset() int64 {
	best := dr.offsets[0]
	for _, o := range dr.offsets[1:dr.n] {
		best = max(best, o)
	}
	return best
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// DriftVersion returns the version Drift would return, without building
// the list.
func (c *Core) DriftVersion() uint64 { return c.driftVersion }

// Drift returns, for every remote PoP heard with heartbeats, the estimated
// clock offset and the rule mismatches, sorted, and a version that changes
// whenever a mismatch or a PoP's Skewed does.
func (c *Core) Drift() ([]PeerDrift, uint64) {
	var out []PeerDrift
	for id, p := range c.peers {
		if p.drift.n == 0 && p.drift.mism == nil {
			continue
		}
		pd := PeerDrift{PoPID: id, Skewed: p.drift.skewed, Mismatches: slices.Clone(p.drift.mism)}
		if p.drift.n > 0 {
			pd.ClockOffset = time.Duration(p.drift.offset())
		}
		out = append(out, pd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j].PoPID) })
	return out, c.driftVersion
}
