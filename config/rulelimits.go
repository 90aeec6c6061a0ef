package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/geolimit/geolimit/pop"
)

// WindowLimit is one window of a rule of several (Rule.Limits), or of an
// override or tier of such a rule.
type WindowLimit struct {
	// Limit is the most cost admitted per sliding window (>= 1).
	Limit uint64 `yaml:"limit"`
	// Window is the sliding window's width: one of the rule's windows in
	// an override or tier.
	Window Duration `yaml:"window"`
}

// Override gives one key limits of its own: Limit for a rule of one
// window, or Limits naming some of the rule's windows (the others keep the
// rule's limit).
type Override struct {
	// Key is the key, exactly as the rule forms it.
	Key string `yaml:"key"`
	// Limit is the key's limit (rules of one window).
	Limit uint64 `yaml:"limit"`
	// Limits are the key's limits by window.
	Limits []WindowLimit `yaml:"limits"`
}

// TierLimit is one tier's limits: in YAML a number (the limit of a rule of
// one window) or {limit: n} or {limits: [{limit, window}, ...]}.
type TierLimit struct {
	// Limit is the tier's limit (rules of one window).
	Limit uint64 `yaml:"limit"`
	// Limits are the tier's limits by window.
	Limits []WindowLimit `yaml:"limits"`
}

// UnmarshalYAML accepts a number or a mapping of limit or limits.
func (t *TierLimit) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v uint64
		if err := n.Decode(&v); err != nil {
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a limit (a positive integer) or {limits: [...]}", n.Line)}}
		}
		*t = TierLimit{Limit: v}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a limit (a positive integer) or {limits: [...]}", n.Line)}}
	}
	for i := 0; i < len(n.Content); i += 2 {
		if k := n.Content[i].Value; k != "limit" && k != "limits" {
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: field %s not found in type config.TierLimit", n.Content[i].Line, k)}}
		}
	}
	type plain TierLimit
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*t = TierLimit(p)
	return nil
}

// popLimits sets the windows, overrides and tiers of p (built from r's
// single limit and window) from r's limits, overrides, tiers and
// default_tier. Errors name the field below the rule.
func (r *Rule) popLimits(p *pop.Rule) error {
	if len(r.Limits) > 0 {
		if r.Limit != 0 || r.Window != 0 {
			return errors.New("limits: set together with limit/window; give either limit and window or limits")
		}
		p.Limit, p.Window = r.Limits[0].Limit, r.Limits[0].Window.D()
		for _, l := range r.Limits[1:] {
			p.More = append(p.More, pop.Limit{Limit: l.Limit, Window: l.Window.D()})
		}
	}
	several := len(r.Limits) > 1
	one := func(at string, limit uint64, limits []WindowLimit) ([]pop.Limit, error) {
		switch {
		case limit != 0 && len(limits) > 0:
			return nil, fmt.Errorf("%s: limit and limits both set; give one", at)
		case limit != 0 && several:
			return nil, fmt.Errorf("%s.limit: the rule has several windows; give limits: [{limit: n, window: w}, ...]", at)
		case limit != 0:
			return []pop.Limit{{Limit: limit, Window: p.Window}}, nil
		}
		out := make([]pop.Limit, len(limits))
		for i, l := range limits {
			out[i] = pop.Limit{Limit: l.Limit, Window: l.Window.D()}
		}
		return out, nil
	}
	for j, o := range r.Overrides {
		ls, err := one(fmt.Sprintf("overrides[%d]", j), o.Limit, o.Limits)
		if err != nil {
			return err
		}
		p.Overrides = append(p.Overrides, pop.Override{Key: o.Key, Limits: ls})
	}
	if len(r.Tiers) > 0 {
		p.Tiers = make(map[string][]pop.Limit, len(r.Tiers))
		names := make([]string, 0, len(r.Tiers))
		for name := range r.Tiers {
			names = append(names, name)
		}
		sort.Strings(names) // the first bad tier by name, every time
		for _, name := range names {
			t := r.Tiers[name]
			ls, err := one("tiers."+name, t.Limit, t.Limits)
			if err != nil {
				return err
			}
			p.Tiers[name] = ls
		}
	}
	p.DefaultTier = r.DefaultTier
	return nil
}

// checkTier checks the tier field: empty, or header:<Name> with tiers set.
func (r *Rule) checkTier() error {
	if r.Tier == "" {
		return nil
	}
	if len(r.Tiers) == 0 {
		return fmt.Errorf("tier: %q set without tiers", r.Tier)
	}
	h, ok := strings.CutPrefix(r.Tier, KeyHeaderPrefix)
	if !ok || h == "" || strings.ContainsAny(h, " \t\r\n:") {
		return fmt.Errorf("tier: %q must be header:<Name>", r.Tier)
	}
	return nil
}
