package pop

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// Limit is one window of a rule: the most cost admitted per sliding Window.
type Limit struct {
	// Limit is the most cost admitted per sliding Window (>= 1).
	Limit uint64
	// Window is the sliding window's width (>= 1ms, whole milliseconds).
	Window time.Duration
}

// Override gives one key of a rule limits of its own.
type Override struct {
	// Key is the key the override applies to.
	Key string
	// Limits are the key's limits: each names one of the rule's windows, and
	// a window not named keeps the rule's (or the default tier's) limit.
	Limits []Limit
}

// MaxWindows is the most windows a rule may have.
const MaxWindows = 8

// MaxOverrides is the most overrides a rule may have, and MaxTiers the
// most tiers.
const (
	MaxOverrides = 100_000
	MaxTiers     = 1000
)

// Windows returns every window of r: Limit and Window first, then More.
func (r Rule) Windows() []Limit {
	out := make([]Limit, 0, 1+len(r.More))
	out = append(out, Limit{Limit: r.Limit, Window: r.Window})
	return append(out, r.More...)
}

// WindowName formats a window's width compactly and exactly: "1h", "90s",
// "500ms". Together with the rule's name it names the window's counts on
// the wire and its RateLimit-Policy item (see WireName).
func WindowName(w time.Duration) string {
	switch {
	case w%time.Hour == 0:
		return strconv.FormatInt(int64(w/time.Hour), 10) + "h"
	case w%time.Minute == 0:
		return strconv.FormatInt(int64(w/time.Minute), 10) + "m"
	case w%time.Second == 0:
		return strconv.FormatInt(int64(w/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(w/time.Millisecond), 10) + "ms"
}

// WireName is the name under which the counts of the window of width w of
// rule r travel between nodes: the rule's name for a rule of one window,
// "name/<window>" (WindowName) for each window of a rule of several. A peer
// with the same rule maps it to the same window; a peer whose rule has other
// windows does not know the name and refuses the entries (ApplyStats.UnknownRule).
func (r Rule) WireName(w time.Duration) string {
	if len(r.More) == 0 {
		return r.Name
	}
	return r.Name + "/" + WindowName(w)
}

// LimitsFor returns the limits that apply to key under tier, one per window
// in the order of Windows: an override of the key wins, else the tier's
// limits, else the default tier's (DefaultTier), else the rule's own. An
// unknown or empty tier is the default. Each window not named by the
// override or tier keeps the rule's limit.
func (r Rule) LimitsFor(key, tier string) []Limit {
	ws := r.Windows()
	for _, o := range r.Overrides {
		if o.Key == key {
			return applyLimits(ws, o.Limits)
		}
	}
	t, ok := r.Tiers[tier]
	if !ok {
		t = r.Tiers[r.DefaultTier]
	}
	return applyLimits(ws, t)
}

func applyLimits(ws, over []Limit) []Limit {
	for _, l := range over {
		for i := range ws {
			if ws[i].Window == l.Window {
				ws[i].Limit = l.Limit
			}
		}
	}
	return ws
}

// validateMore checks the windows, overrides and tiers of r (the fields of
// several windows, tiers and overrides), naming the field.
func (r Rule) validateMore() error {
	if len(r.More) > MaxWindows-1 {
		return fmt.Errorf("limits: at most %d windows, got %d", MaxWindows, 1+len(r.More))
	}
	ws := r.Windows()
	for i, l := range ws {
		at := "limit"
		if len(ws) > 1 {
			at = fmt.Sprintf("limits[%d]", i)
		}
		if err := checkLimit(l); err != nil {
			if len(ws) > 1 {
				return fmt.Errorf("%s.%w", at, err)
			}
			return err
		}
		for j := range i {
			if ws[j].Window == l.Window {
				return fmt.Errorf("%s.window: %s already used by limits[%d]", at, l.Window, j)
			}
		}
		if r.Cost > l.Limit {
			return fmt.Errorf("cost: %d exceeds %s %d", r.Cost, at, l.Limit)
		}
	}
	if len(ws) > 1 {
		longest := len(r.WireName(time.Duration(MaxWindowWidth - time.Millisecond)))
		if longest > crdt.MaxRuleNameLen {
			return fmt.Errorf("name: a rule of several windows names each window's counts %q on the wire: the name must be at most %d bytes, got %d",
				r.Name+"/<window>", crdt.MaxRuleNameLen-(longest-len(r.Name)), len(r.Name))
		}
	}
	if len(r.Overrides) > MaxOverrides {
		return fmt.Errorf("overrides: at most %d, got %d", MaxOverrides, len(r.Overrides))
	}
	seen := make(map[string]int, len(r.Overrides))
	for i, o := range r.Overrides {
		at := fmt.Sprintf("overrides[%d]", i)
		switch {
		case o.Key == "" || len(o.Key) > crdt.MaxKeyLen:
			return fmt.Errorf("%s.key: must be 1-%d bytes, got %d", at, crdt.MaxKeyLen, len(o.Key))
		}
		if j, dup := seen[o.Key]; dup {
			return fmt.Errorf("%s.key: %q already overridden by overrides[%d]", at, o.Key, j)
		}
		seen[o.Key] = i
		if err := r.checkLimits(at, ws, o.Limits); err != nil {
			return err
		}
	}
	if len(r.Tiers) > MaxTiers {
		return fmt.Errorf("tiers: at most %d, got %d", MaxTiers, len(r.Tiers))
	}
	names := make([]string, 0, len(r.Tiers))
	for name := range r.Tiers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" || len(name) > crdt.MaxKeyLen {
			return fmt.Errorf("tiers: a tier name must be 1-%d bytes, got %q", crdt.MaxKeyLen, name)
		}
		if err := r.checkLimits("tiers."+name, ws, r.Tiers[name]); err != nil {
			return err
		}
	}
	if r.DefaultTier != "" {
		if _, ok := r.Tiers[r.DefaultTier]; !ok {
			return fmt.Errorf("default_tier: unknown tier %q (tiers: %v)", r.DefaultTier, names)
		}
	}
	return nil
}

// MaxWindowWidth is the widest window a rule may have.
const MaxWindowWidth = 30 * 24 * time.Hour

func checkLimit(l Limit) error {
	switch {
	case l.Limit < 1:
		return errors.New("limit: must be at least 1")
	case l.Limit > MaxLimit:
		return fmt.Errorf("limit: must be at most %d (2^53), got %d", uint64(MaxLimit), l.Limit)
	case l.Window < time.Millisecond || l.Window%time.Millisecond != 0:
		return fmt.Errorf("window: must be a whole number of milliseconds >= 1ms, got %s", l.Window)
	case l.Window > MaxWindowWidth:
		return fmt.Errorf("window: must be at most 720h, got %s", l.Window)
	}
	return nil
}

// checkLimits checks the limits of an override or a tier (at names it):
// at least one, each of one of the rule's windows ws, at most once, within
// bounds and not below the rule's cost.
func (r Rule) checkLimits(at string, ws, ls []Limit) error {
	if len(ls) == 0 {
		return fmt.Errorf("%s.limit: required", at)
	}
	for i, l := range ls {
		li, pre := at+".limit", at+"."
		if len(ws) > 1 || len(ls) > 1 || l.Window != ws[0].Window {
			li = fmt.Sprintf("%s.limits[%d]", at, i)
			pre = li + "."
		}
		known := false
		for _, w := range ws {
			known = known || w.Window == l.Window
		}
		if !known {
			return fmt.Errorf("%swindow: %s is not one of the rule's windows", pre, l.Window)
		}
		for j := range i {
			if ls[j].Window == l.Window {
				return fmt.Errorf("%swindow: %s already given by %s.limits[%d]", pre, l.Window, at, j)
			}
		}
		if err := checkLimit(l); err != nil {
			return fmt.Errorf("%s%w", pre, err)
		}
		if r.Cost > l.Limit {
			return fmt.Errorf("%slimit: %d is below the rule's cost %d", pre, l.Limit, r.Cost)
		}
	}
	return nil
}

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
	rs := &ruleState{Rule: r, width: int64(r.Window), wire: r.WireName(r.Window)}
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

// Options are the optional inputs of DecideWith and PeekWith.
type Options struct {
	// Tier names the request's tier (Rule.Tiers); empty or unknown means
	// the rule's default tier.
	Tier string
}

// DecideWith is Decide for a request that names a tier (Options.Tier). On a
// rule without tiers it is Decide.
func (n *Node) DecideWith(now int64, rule, key string, cost uint64, o Options) (Decision, error) {
	return n.decideWith(now, rule, key, cost, o.Tier, true)
}

// PeekWith is Peek for a request that names a tier.
func (n *Node) PeekWith(now int64, rule, key string, cost uint64, o Options) (Decision, error) {
	return n.decideWith(now, rule, key, cost, o.Tier, false)
}

func (n *Node) decideWith(now int64, rule, key string, cost uint64, tier string, count bool) (Decision, error) {
	r, ok := n.rules.Load().get(rule)
	if !ok || r.lims == nil || tier == "" {
		return n.decide(now, rule, key, cost, count)
	}
	switch {
	case len(key) == 0:
		return Decision{}, ErrEmptyKey
	case len(key) > crdt.MaxKeyLen:
		return Decision{}, ErrKeyTooLong
	case cost < 1:
		return Decision{}, ErrBadCost
	}
	return n.decideMulti(now, r, key, tier, cost, count)
}

// decideMulti decides a rule of several windows, overrides or tiers. The
// request must fit in every window under the limits of its key and tier.
// First every window is checked without counting; if one denies, nothing is
// counted anywhere. Otherwise the cost is added to every window. Between
// the check and the counts a concurrent request of the same key may take
// the last units of a window; both are then admitted, and that window may
// end up over its limit by the cost of the requests that raced (never a
// window counted for a denied request).
func (n *Node) decideMulti(now int64, r *ruleState, key, tier string, cost uint64, count bool) (Decision, error) {
	if cost > r.maxCost {
		return Decision{}, ErrCostOverLimit
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
		res[i] = n.admitWindow(now, w, key, lim, cost, count && one, count)
		allowed = allowed && res[i].Allowed
		untracked = untracked || res[i].Untracked
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
	d := Decision{
		Allowed:    allowed,
		Untracked:  untracked,
		Limit:      lim,
		Remaining:  res[b].Remaining,
		Reset:      time.Duration(res[b].Reset),
		RetryAfter: time.Duration(res[b].RetryAfter),
		Binding:    uint8(b),
		Limits:     lims,
	}
	if !d.Allowed && r.Mode == Shadow {
		d.Allowed, d.ShadowDenied = true, true
	}
	return d, nil
}

// admitWindow decides (and with count, counts) a request of cost against
// limit in one window w of a rule, under the share policy as decide does,
// and records the demand with record. Remaining is capped by the share.
func (n *Node) admitWindow(now int64, w *ruleState, key string, limit, cost uint64, count, record bool) crdt.AdmitResult {
	idx, el := w.split(now)
	var sh *share
	if w.OnPartition == Share && w.Scope == ScopeGlobal && n.part.Load() != nil {
		if lim, s, ok := n.shareLimit(w, key, now, idx, el); ok {
			limit, sh = uint64(min(lim, float64(limit))), s
		}
	}
	var res crdt.AdmitResult
	if cost > limit {
		res = crdt.AdmitResult{Result: window.Result{Remaining: limit, RetryAfter: w.width, Reset: w.width}}
	} else {
		res = n.store.AdmitSplit(w.id, key, crdt.Now{Index: idx, Elapsed: el, Width: w.width}, limit, cost, count, n.allow[w.Scope&3].Load())
	}
	if sh != nil && record {
		sh.record(idx, cost, !res.Allowed)
	}
	res.Remaining = min(res.Remaining, limit)
	return res
}

// WireRule returns the rule of the window whose counts travel under the
// wire name (Rule.WireName): for a window of a rule of several, a Rule
// whose Limit and Window are that window's (the largest limit a key may
// have there is the rule's concern, not the wire's).
func (n *Node) WireRule(wire string) (Rule, bool) {
	r, ok := n.rules.Load().byWire[wire]
	if !ok {
		return Rule{}, false
	}
	return r.Rule, true
}

// Limits returns the limits that apply to key under tier in rule, one per
// window in the order of Rule.Windows: what DecideWith compares the
// request with. It allocates; the RateLimit-Policy of a request whose
// Decision.Limits is set is built from it.
func (n *Node) Limits(rule, key, tier string) ([]Limit, bool) {
	r, ok := n.rules.Load().byName[rule]
	if !ok {
		return nil, false
	}
	ws := r.Windows()
	if l := r.limitsFor(key, tier); l != nil {
		for i := range ws {
			ws[i].Limit = l[i]
		}
	}
	return ws, true
}
