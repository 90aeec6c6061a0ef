// Rules of several windows, overrides and tiers: their types, wire names
// and validation. decidemulti.go decides them.

package pop

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/geolimit/geolimit/crdt"
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
