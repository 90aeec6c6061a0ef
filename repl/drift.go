package repl

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/wire"
)

// Drift detection: PoPs that disagree on a global rule, or whose clocks are
// far apart, replicate without error and yet do not limit together (a rule
// whose window differs shares no counts; a clock far ahead counts in windows
// the others have not reached). Heartbeats therefore carry, as control
// entries, one fingerprint per global rule of the sender: Rule the rule's
// name, Key fingerprintKey, Window the rule's window in milliseconds, Count
// replicated.RuleInfo.Fingerprint. A node of an older version ignores a heartbeat's
// entries; one of a newer version that gets none reports nothing.
//
// Each side reports what the other has that it does not: a rule of the
// peer's that it lacks or that differs. A heartbeat too large for one message
// is split, so a rule is judged by its own entry only: a mismatch is set or
// updated when an entry shows it, cleared when an entry shows the rule
// alike, and forgotten when no entry of the peer has shown it for
// driftExpiry peer timeouts (the peer dropped the rule); nothing is
// concluded from a rule's absence in one part.
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

// driftExpiry is how many peer timeouts a mismatch no heartbeat has shown
// again is kept.
const driftExpiry = 2

// maxClockOffset bounds a heartbeat's SentAt - receive time, so that an
// absurd SentAt neither wraps the subtraction nor hides a skew.
const maxClockOffset = int64(24 * time.Hour)

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
	identity.PoPID
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
	// clockOff: the offset is beyond minCorrection; back, when hasBack,
	// the PoP's own estimate of this node's offset (fleetclock.go).
	clockOff bool
	hasBack  bool
	back     int64
	// used is the fleetOffset the correction was last computed with
	// (usedSet): a heartbeat that moves it by less than a quarter of
	// correctionStep does not recompute it (fleetclock.go).
	used    int64
	usedSet bool
	mism    []RuleMismatch // sorted by rule
	shown   []int64        // when a heartbeat last showed mism[i]
}

// fingerprints returns the control entries of this node's global rules.
func (c *Core) fingerprints() []crdt.Entry {
	var out []crdt.Entry
	for _, r := range c.node.Rules() {
		if r.Scope == replicated.ScopeGlobal {
			out = append(out, crdt.Entry{Rule: r.Name, Key: fingerprintKey, Window: r.Window.Milliseconds(), Count: r.Fingerprint})
		}
	}
	return out
}

// checkDrift takes a heartbeat of p: its clock and its rules' fingerprints.
func (c *Core) checkDrift(now int64, p *peer, d *wire.Delta) {
	dr := &p.drift
	if d.SentAt != 0 {
		if dr.n == 0 {
			c.clocked = append(c.clocked, p) // fleetclock.go
			if p.expected {
				c.clockedExpected++
			}
		}
		dr.offsets[dr.next] = min(max(d.SentAt, now-maxClockOffset), now+maxClockOffset) - now
		dr.next = (dr.next + 1) % driftSamples
		dr.n = min(dr.n+1, driftSamples)
	}
	c.takeOffsets(p, d)
	if dr.n > 0 {
		c.markClockOff(p)
		if c.correctionMoved(now, p) {
			c.updateCorrection(now)
		}
	}
	skewed := dr.n > 0 && abs(dr.offset()) > int64(c.node.MaxSkew())
	changed := skewed != dr.skewed
	dr.skewed = skewed
	for _, e := range d.Entries {
		if e.Key != fingerprintKey {
			continue
		}
		var m RuleMismatch
		bad := true
		switch r, ok := c.node.Rule(e.Rule); {
		case !ok || r.Scope != replicated.ScopeGlobal:
			m = RuleMismatch{Rule: e.Rule, Absent: true, PeerWindowMS: e.Window}
		case r.Fingerprint != e.Count:
			m = RuleMismatch{Rule: e.Rule, PeerWindowMS: e.Window, WindowMS: r.Window.Milliseconds()}
		default:
			bad = false
		}
		changed = dr.show(now, e.Rule, m, bad) || changed
	}
	for i := 0; i < len(dr.mism); {
		if now-dr.shown[i] > driftExpiry*int64(c.cfg.PeerTimeout) {
			dr.mism, dr.shown = slices.Delete(dr.mism, i, i+1), slices.Delete(dr.shown, i, i+1)
			changed = true
			continue
		}
		i++
	}
	if changed {
		c.driftVersion++
	}
}

// show records what a heartbeat entry showed of rule at now: the mismatch m
// when bad, else that the rule is alike. It reports whether the mismatches
// changed.
func (dr *peerDrift) show(now int64, rule string, m RuleMismatch, bad bool) bool {
	i, found := slices.BinarySearchFunc(dr.mism, rule, func(x RuleMismatch, r string) int { return strings.Compare(x.Rule, r) })
	switch {
	case found && bad:
		dr.shown[i] = now
		if dr.mism[i] != m {
			dr.mism[i] = m
			return true
		}
	case found:
		dr.mism, dr.shown = slices.Delete(dr.mism, i, i+1), slices.Delete(dr.shown, i, i+1)
		return true
	case bad && len(dr.mism) < maxMismatches:
		dr.mism, dr.shown = slices.Insert(dr.mism, i, m), slices.Insert(dr.shown, i, now)
		return true
	}
	return false
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
	for id, p := range c.peers.m {
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
