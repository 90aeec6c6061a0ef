// Rules paced by the generic cell rate algorithm (Rule.Algorithm GCRA):
// their validation, compiled state and decision.

package pop

import (
	"errors"
	"fmt"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gcra"
)

// Algorithm says how a rule decides.
type Algorithm uint8

// Algorithms.
const (
	// SlidingWindow admits up to Limit per sliding Window, estimated from
	// the counts of two fixed windows (package window). The default.
	SlidingWindow Algorithm = iota
	// GCRA paces a key to one unit of cost every Window/Limit, of which up
	// to Burst may arrive at once (package gcra): one theoretical arrival
	// time per key. At node scope that is all it keeps; at pop and global
	// scope it counts its admissions as a sliding window rule does, and
	// paces on every increase of those counts it sees (gcra_shared.go).
	GCRA
)

var algorithmNames = [...]string{"sliding_window", "gcra"}

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", a)
}

// ParseAlgorithm parses "sliding_window" or "gcra"; empty is SlidingWindow.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return SlidingWindow, nil
	}
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want sliding_window or gcra)", s)
}

// MinGCRAInterval is the shortest emission interval (Window/Limit) of a
// GCRA rule. The interval is rounded up to a whole nanosecond, so a rule's
// pace is slower than Limit per Window by less than one part in a thousand.
const MinGCRAInterval = time.Microsecond

// GCRARate returns the pace of a GCRA rule: one unit every Window/Limit
// (rounded up to a whole nanosecond), BurstOf at once.
func (r Rule) GCRARate() gcra.Rate {
	return gcra.Of(r.Limit, int64(r.Window), r.BurstOf())
}

// BurstOf is the rule's burst: Burst, or Limit when Burst is 0.
func (r Rule) BurstOf() uint64 {
	if r.Burst == 0 {
		return r.Limit
	}
	return r.Burst
}

// validateGCRA checks the fields of a rule's algorithm, naming the field.
// Limit, Window and Cost are checked already.
func (r Rule) validateGCRA() error {
	switch {
	case r.Algorithm > GCRA:
		return fmt.Errorf("algorithm: unknown algorithm %d", r.Algorithm)
	case r.Algorithm != GCRA && r.Burst != 0:
		return errors.New("burst: only an algorithm: gcra rule has a burst")
	case r.Algorithm != GCRA:
		return nil
	case r.Burst > r.Limit:
		return fmt.Errorf("burst: %d exceeds limit %d: a gcra rule admits at most its limit at once", r.Burst, r.Limit)
	case r.Cost > r.BurstOf():
		return fmt.Errorf("cost: %d exceeds burst %d: such a request could never be admitted", r.Cost, r.BurstOf())
	case r.Window/time.Duration(r.Limit) < MinGCRAInterval:
		return fmt.Errorf("limit: a gcra rule paces one unit every window/limit, which must be at least %s: limit at most %d for window %s",
			MinGCRAInterval, uint64(r.Window/MinGCRAInterval), r.Window)
	case len(r.More) > 0:
		return errors.New("limits: an algorithm: gcra rule has one rate, limit per window, not several windows")
	case len(r.Overrides) > 0:
		return errors.New("overrides: not supported by an algorithm: gcra rule (one rate for every key)")
	case len(r.Tiers) > 0 || r.DefaultTier != "":
		return errors.New("tiers: not supported by an algorithm: gcra rule (one rate for every key)")
	case r.OnPartition != Keep:
		return errors.New("on_partition: an algorithm: gcra rule keeps pacing on what each side sees during a partition (keep); share is not supported")
	}
	return nil
}

// newGCRAState compiles a valid GCRA rule. It is decided apart from the
// windows' path (multi, with gcra set): its store window is the rate's
// tolerance, the time a key takes to earn its burst back, so that a key
// whose windows have all passed is back to a full burst and may be swept
// (crdt.Store.PaceHashed).
func newGCRAState(r Rule) *ruleState {
	if r.Scope != ScopeNode {
		return newSharedGCRAState(r)
	}
	rs := &ruleState{Rule: r, wire: r.WireName(r.Window), multi: true, gcra: true, rate: r.GCRARate()}
	rs.paceBy = rs.rate
	rs.width = max(rs.rate.Tolerance(), 1)
	rs.wins = []*ruleState{rs}
	rs.clamp = r.Limit
	rs.maxCost = r.BurstOf()
	return rs
}

// protectGCRA is the store's protection threshold of a GCRA rule (see
// protectThreshold): a key whose TAT lies more than half its tolerance past
// its store window's start, about half its burst spent, keeps its place.
func protectGCRA(r *ruleState) uint64 { return uint64(r.width/2) + 1 }

// sameState reports whether the counts of window state o may serve the
// window state w of a rule set again: both count, or both pace with one
// store window. A rule whose algorithm or burst changed starts afresh.
func sameState(o, w *ruleState) bool {
	return o.gcra == w.gcra && o.width == w.width && o.Calendar.Equal(w.Calendar)
}

// admitGCRA is step 3 of decideRule for a GCRA rule: the key's TAT admits
// (and with count, moves; a pop or global rule's admission is counted in
// its window too, gcra_shared.go). Under on_unsure: deny a new key the
// store has no room for is denied before anything is counted.
func (n *Node) admitGCRA(d *Decision, now int64, r *ruleState, key string, cost uint64, count bool) Unsure {
	p := r // the state that keeps the TATs: the rule's own, or its pacer
	var hc uint64
	h := n.store.Hash(p.id, key)
	if r.pacer != nil {
		// The TAT's slot lies in the counted slot's shard.
		p, hc = r.pacer, h
		h = crdt.RuleHash(hc, r.id, p.id)
		n.store.PrefetchSlot(h)
	}
	if count && r.OnUnsure == DenyUnsure {
		if _, untracked := n.store.PaceHashed(h, p.id, key, now, p.width, p.paceBy, cost, false); untracked {
			return UnsureStoreFull
		}
	}
	var tat int64
	var untracked bool
	if r.pacer != nil && count {
		tat, untracked = n.paceShared(now, r, h, hc, key, cost)
	} else {
		tat, untracked = n.store.PaceHashed(h, p.id, key, now, p.width, p.paceBy, cost, count)
	}
	var res gcra.Result
	p.rate.Decide(&res, tat, now, cost) // the store's decision, in full
	d.Allowed, d.ShadowDenied, d.Untracked = res.Allowed, false, untracked
	d.Blocked, d.BlockStarted, d.Unsure = false, false, UnsureNone
	d.Limit, d.Remaining = r.Limit, res.Remaining
	d.Reset, d.RetryAfter = time.Duration(res.Reset), time.Duration(max(res.RetryAfter, 0))
	d.Binding, d.Limits = 0, nil
	return UnsureNone
}

// viewGCRA is View of a GCRA rule: Estimate is the cost the key has spent
// and not yet earned back, (TAT - now) / interval; TAT is its theoretical
// arrival time (0 for a key not held). Of a pop or global rule, Windows
// are the counts replicated and the TAT is this node's.
func (n *Node) viewGCRA(now int64, r *ruleState, v *KeyView, key string) {
	v.Windows = []crdt.WindowView{}
	if r.pacer != nil {
		v.Windows = n.viewWindow(now, r, key).Windows // the counts replicated
		r = r.pacer
	}
	tat, ok := n.store.PaceTAT(r.id, key, r.width)
	if !ok {
		return
	}
	v.TAT = tat
	if tat > now {
		v.Estimate = float64(tat-now) / float64(r.rate.Interval)
	}
}
