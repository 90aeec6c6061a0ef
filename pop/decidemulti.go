// Deciding rules of several windows, overrides and tiers (limits.go).

package pop

import (
	"math"
	"time"

	"github.com/geolimit/geolimit/crdt"
)

// limitTable holds a rule's overrides and tiers as limits per window, in
// the order of Rule.Windows.
type limitTable struct {
	keys  map[string][]uint64
	tiers map[string][]uint64
	def   []uint64 // DefaultTier's; nil for the rule's own
}

// newRuleState compiles a valid rule: its windows (further ones as sub
// states), limit table, clamps and largest cost. Ids are left to SetRules.
func newRuleState(r Rule) *ruleState {
	if r.Algorithm == GCRA {
		return newGCRAState(r)
	}
	rs := &ruleState{Rule: r, width: int64(r.Window), wire: r.WireName(r.Window), cal: calendarOf(r)}
	if r.Kind == Concurrency {
		rs.width = int64(time.Second) // counts nothing in windows; never 0
	}
	ws := r.Windows()
	rs.multi = len(ws) > 1 || len(r.Overrides) > 0 || len(r.Tiers) > 0
	if !rs.multi {
		rs.clamp = r.Limit
		return rs
	}
	rs.wins = []*ruleState{rs}
	for _, l := range ws[1:] {
		sub := &ruleState{Rule: r, width: int64(l.Window), wire: r.WireName(l.Window), sub: true}
		sub.Limit, sub.Window = l.Limit, l.Window
		sub.More, sub.Overrides, sub.Tiers, sub.DefaultTier = nil, nil, nil, ""
		rs.wins = append(rs.wins, sub)
	}
	if len(r.Overrides) > 0 || len(r.Tiers) > 0 {
		t := &limitTable{}
		limits := func(over []Limit) []uint64 {
			out := make([]uint64, len(ws))
			for i, l := range applyLimits(r.Windows(), over) {
				out[i] = l.Limit
			}
			return out
		}
		if len(r.Overrides) > 0 {
			t.keys = make(map[string][]uint64, len(r.Overrides))
			for _, o := range r.Overrides {
				t.keys[o.Key] = limits(o.Limits)
			}
		}
		if len(r.Tiers) > 0 {
			t.tiers = make(map[string][]uint64, len(r.Tiers))
			for name, ls := range r.Tiers {
				t.tiers[name] = limits(ls)
			}
		}
		if r.DefaultTier != "" {
			t.def = t.tiers[r.DefaultTier]
		}
		rs.lims = t
	}
	clamps := r.largest()
	for i, w := range rs.wins {
		w.clamp = clamps[i].Limit
	}
	rs.maxCost = r.MaxCost()
	return rs
}

// largest returns, per window in the order of Windows, the largest limit
// the rule gives any key: its own, an override's or a tier's.
func (r Rule) largest() []Limit {
	ws := r.Windows()
	raise := func(ls []Limit) {
		for _, l := range ls {
			for i := range ws {
				if ws[i].Window == l.Window {
					ws[i].Limit = max(ws[i].Limit, l.Limit)
				}
			}
		}
	}
	for _, o := range r.Overrides {
		raise(o.Limits)
	}
	for _, t := range r.Tiers {
		raise(t)
	}
	return ws
}

// MaxCost is the largest cost a request of the rule may name: the least,
// over its windows, of the largest limit the window gives any key. A
// larger cost is an error (ErrCostOverLimit); one within it but above the
// request's own limits is a denial.
func (r Rule) MaxCost() uint64 {
	if r.Algorithm == GCRA {
		return r.BurstOf()
	}
	c := uint64(MaxLimit)
	for _, l := range r.largest() {
		c = min(c, l.Limit)
	}
	return c
}

// windows returns every window state of the rule, itself first.
func (r *ruleState) windows() []*ruleState {
	if r.wins != nil {
		return r.wins
	}
	return []*ruleState{r}
}

// window returns the state of the window of width w of the rule called
// name, or nil.
func (rs *ruleSet) window(name string, w time.Duration) *ruleState {
	r := rs.byName[name]
	if r == nil {
		return nil
	}
	for _, s := range r.windows() {
		if s.Window == w {
			return s
		}
	}
	return nil
}

// limitsFor returns the limits per window that apply to key under tier, or
// nil for the rule's own.
func (r *ruleState) limitsFor(key, tier string) []uint64 {
	t := r.lims
	if t == nil {
		return nil
	}
	if len(t.keys) != 0 {
		if l, ok := t.keys[key]; ok {
			return l
		}
	}
	if tier != "" {
		if l, ok := t.tiers[tier]; ok {
			return l
		}
	}
	return t.def
}

// Options are the optional inputs of a check of a rule (its tier).
type Options struct {
	// Tier names the request's tier (Rule.Tiers); empty or unknown means
	// the rule's default tier.
	Tier string
}

func (n *Node) decideWith(now int64, rule, key string, cost uint64, tier string, count bool) (d Decision, err error) {
	r, ok := n.rules.Load().get(rule)
	if !ok {
		return Decision{}, ErrUnknownRule
	}
	err = n.decideRule(&d, now, r, key, cost, tier, howOf(count), nil)
	return
}

// admitWindows is step 3 of decideRule for a rule of several windows,
// overrides or tiers. The request must fit in every window under the
// limits of its key and tier. First every window is checked without
// counting; if one denies, nothing is counted anywhere. Otherwise the cost
// is added to every window. Between the check and the counts a concurrent
// request of the same key may take the last units of a window; both are
// then admitted, and that window may end up over its limit by the cost of
// the requests that raced (never a window counted for a denied request).
func (n *Node) admitWindows(d *Decision, now int64, r *ruleState, key, tier string, cost uint64, count bool) Unsure {
	if r.gcra || r.pacer != nil {
		// A GCRA rule is decided here, off decideRule's one-window path,
		// so that path's code stays as it is.
		return n.admitGCRA(d, now, r, key, cost, count)
	}
	lims := r.limitsFor(key, tier)
	one := len(r.wins) == 1
	var res [MaxWindows]crdt.AdmitResult
	allowed, untracked := true, false
	for i, w := range r.wins {
		lim := w.Limit
		if lims != nil {
			lim = lims[i]
		}
		if u := n.admitWindow(&res[i], now, w, key, lim, cost, modeOf(count && one, count)); u != UnsureNone {
			return u // nothing was counted in this window, nor before it
		}
		allowed = allowed && res[i].Allowed
		untracked = untracked || res[i].Untracked
	}
	if untracked && r.OnUnsure == DenyUnsure && !one {
		// A key the store may have no room for: fail closed before
		// anything is counted.
		return UnsureStoreFull
	}
	if allowed && count && !one {
		for _, w := range r.wins {
			idx, el := w.split(now)
			a := n.store.AdmitSplit(w.id, key, crdt.Now{Index: idx, Elapsed: el, Width: w.width}, math.MaxUint64, cost, true, nil)
			untracked = untracked || a.Untracked
		}
	}
	b := 0
	for i := 1; i < len(r.wins); i++ {
		x, y := &res[i], &res[b]
		if allowed && (x.Remaining < y.Remaining || (x.Remaining == y.Remaining && x.Reset > y.Reset)) ||
			!allowed && !x.Allowed && (y.Allowed || x.RetryAfter > y.RetryAfter) {
			b = i
		}
	}
	lim := r.wins[b].Limit
	if lims != nil {
		lim = lims[b]
	}
	*d = Decision{
		Allowed:    allowed,
		Untracked:  untracked,
		Limit:      lim,
		Remaining:  res[b].Remaining,
		Reset:      time.Duration(res[b].Reset),
		RetryAfter: time.Duration(res[b].RetryAfter),
		Binding:    uint8(b),
		Limits:     lims,
	}
	return UnsureNone
}
