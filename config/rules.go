package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated"
)

// Rule is one rate-limit rule.
type Rule struct {
	// Name identifies the rule (1-64 bytes, no '/', quotes or white space).
	Name string `yaml:"name"`
	// Match selects the proxied requests the rule applies to; empty = all.
	Match Match `yaml:"match"`
	// Key says what forms the key in proxy mode: ip, header:<Name>, path or
	// host, or a list of these for a composite key. Default ip.
	Key KeySpec `yaml:"key"`
	// Limit is the most cost admitted per sliding window (>= 1).
	Limit uint64 `yaml:"limit"`
	// Window is the sliding window's width (>= 1ms, whole milliseconds).
	Window Duration `yaml:"window"`
	// Limits are several windows instead of limit and window (rulelimits.go).
	Limits []WindowLimit `yaml:"limits"`
	// Overrides give keys limits of their own.
	Overrides []Override `yaml:"overrides"`
	// Tier is where proxy mode and forward auth read a request's tier:
	// header:<Name>. Empty: no tier from requests.
	Tier string `yaml:"tier"`
	// Tiers map tier names to their limits.
	Tiers map[string]TierLimit `yaml:"tiers"`
	// DefaultTier names the tier of requests that name none or an unknown
	// one; empty means the rule's own limit(s).
	DefaultTier string `yaml:"default_tier"`
	// Cost is the cost of a request that names none. Default 1.
	Cost uint64 `yaml:"cost"`
	// Scope is node, pop or global. Default global.
	Scope string `yaml:"scope"`
	// Mode is enforce or shadow. Default enforce.
	Mode string `yaml:"mode"`
	// OnPartition is keep or share. Default keep.
	OnPartition string `yaml:"on_partition"`
	// ShareRise, for on_partition: share, is how far past its part of the
	// limit (0 to 1, a fraction of the limit) a side's share may grow in a
	// cut on a growth of its demand that a failover of part of the other
	// side's traffic and a rise on both sides would both show: the least
	// such a failover is given and the most such a rise goes over. Default
	// 0.2; 0: a side grows past its part only on a whole failover.
	ShareRise *float64 `yaml:"share_rise"`
	// BlockFor, when set, keeps a key the rule denies denied for that long
	// (the penalty box), on every node the rule's scope reaches (whole
	// milliseconds, at most 720h). Default 0: no penalty box.
	BlockFor Duration `yaml:"block_for"`
	// OnUnsure is allow or deny: what the rule answers when the node cannot
	// know a key's count (store full, counts not synced yet after a start,
	// no history under on_partition: share). Default allow.
	OnUnsure string `yaml:"on_unsure"`
	// Kind is rate (the default: limit is cost per window) or concurrency
	// (limit is requests in flight per key; concurrency.go).
	Kind string `yaml:"kind"`
	// LeaseTTL, for kind: concurrency, is how long a lease holds its slot
	// unless released first, and how long a PoP member's in-flight count
	// stands unless it is heard again (whole milliseconds, 1s to 24h).
	// Default 1m.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// Algorithm is sliding_window (the default) or gcra: a pace of one
	// request every window/limit, burst at once (any scope; on_partition
	// keep).
	Algorithm string `yaml:"algorithm"`
	// Burst is, for algorithm: gcra, the most cost admitted at once by a
	// key idle long enough (1 to limit). Default limit.
	Burst uint64 `yaml:"burst"`
	// Calendar, instead of window, makes limit a quota per calendar day,
	// week or month in a time zone, whole again at the period's end
	// (calendar.go).
	Calendar *Calendar `yaml:"calendar"`
}

// Match selects requests in proxy mode. Every non-empty field must match.
type Match struct {
	// PathPrefix matches paths that start with it (after dot segments and
	// repeated slashes are resolved, percent-escapes decoded).
	PathPrefix string `yaml:"path_prefix"`
	// IgnoreCase matches PathPrefix regardless of case, and makes a path
	// key part lower case: for an upstream that routes /Login and /login
	// to one handler.
	IgnoreCase bool `yaml:"ignore_case"`
	// Methods lists the HTTP methods matched (upper case).
	Methods []string `yaml:"methods"`
	// Host matches the request's host (case-insensitive, port ignored).
	Host string `yaml:"host"`
}

// KeySpec is a rule's key: one part or a composite of several.
type KeySpec []string

// Key parts.
const (
	KeyIP   = "ip"
	KeyPath = "path"
	KeyHost = "host"
	// KeyHeaderPrefix starts a header part: "header:X-Api-Key".
	KeyHeaderPrefix = "header:"
)

// DemoRules is the rule set of a node started without a config file
// (config/demo.yaml).
func DemoRules() []Rule { return Demo().Rules }

// ApplyRuleDefaults fills each rule's omitted cost, key, scope, mode and
// on_partition with their defaults.
func (c *Config) ApplyRuleDefaults() { RuleDefaults(c.Rules) }

// RuleDefaults fills the unset fields of rules with their defaults: cost 1,
// key ip, scope global, mode enforce, on_partition keep. The simulator's
// scenario files share this rule schema.
func RuleDefaults(rules []Rule) {
	for i := range rules {
		r := &rules[i]
		if r.Cost == 0 {
			r.Cost = 1
		}
		concurrencyDefaults(r)
		if len(r.Key) == 0 {
			r.Key = KeySpec{KeyIP}
		}
		if r.Scope == "" {
			r.Scope = "global"
		}
		if r.Mode == "" {
			r.Mode = "enforce"
		}
		if r.OnPartition == "" {
			r.OnPartition = "keep"
		}
		if r.OnUnsure == "" {
			r.OnUnsure = "allow"
		}
	}
}

// ValidateRules checks rules as pop does (limit, window, cost, scope, mode,
// on_partition, unique names) plus the proxy fields (match, key). Omitted
// fields must have been defaulted (ApplyRuleDefaults).
func ValidateRules(rules []Rule) error {
	if _, err := PopRules(rules); err != nil {
		return err
	}
	for i, r := range rules {
		if err := r.Match.validate(); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
		if len(r.Key) == 0 {
			return fmt.Errorf("rules[%d].key: required", i)
		}
		if err := r.checkTier(); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
		for j, k := range r.Key {
			if err := checkKeyPart(k); err != nil {
				if len(r.Key) == 1 {
					return fmt.Errorf("rules[%d].key: %w", i, err)
				}
				return fmt.Errorf("rules[%d].key[%d]: %w", i, j, err)
			}
		}
	}
	return nil
}

func checkKeyPart(k string) error {
	switch {
	case k == KeyIP || k == KeyPath || k == KeyHost:
		return nil
	case strings.HasPrefix(k, KeyHeaderPrefix):
		h := k[len(KeyHeaderPrefix):]
		if h == "" || strings.ContainsAny(h, " \t\r\n:") {
			return fmt.Errorf("%q: header name missing or invalid", k)
		}
		return nil
	}
	return fmt.Errorf("unknown key %q (want ip, header:<Name>, path, host or a list of these)", k)
}

// PopRules converts the rules to pop rules, with errors naming the rule's
// index and field.
func (c *Config) PopRules() ([]pop.Rule, error) { return PopRules(c.Rules) }

// PopRules converts rules to pop rules, with errors naming the rule's index
// and field.
func PopRules(rules []Rule) ([]pop.Rule, error) {
	out := make([]pop.Rule, len(rules))
	for i, r := range rules {
		cal, err := r.popCalendar()
		if err != nil {
			return nil, fmt.Errorf("rules[%d].%w", i, err)
		}
		kind, err := r.popKind()
		if err != nil {
			return nil, fmt.Errorf("rules[%d].%w", i, err)
		}
		scope, err := replicated.ParseScope(r.Scope)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].scope: %w", i, err)
		}
		mode, err := pop.ParseMode(r.Mode)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].mode: %w", i, err)
		}
		pol, err := pop.ParsePolicy(r.OnPartition)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].on_partition: %w", i, err)
		}
		unsure, err := pop.ParseUnsurePolicy(r.OnUnsure)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].on_unsure: %w", i, err)
		}
		alg, err := pop.ParseAlgorithm(r.Algorithm)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].algorithm: %w", i, err)
		}
		rise, err := r.popShareRise()
		if err != nil {
			return nil, fmt.Errorf("rules[%d].%w", i, err)
		}
		out[i] = pop.Rule{Name: r.Name, Limit: r.Limit, Window: r.Window.D(), Cost: r.Cost, Scope: scope, Mode: mode, OnPartition: pol,
			ShareRise: rise, BlockFor: r.BlockFor.D(), OnUnsure: unsure, Algorithm: alg, Burst: r.Burst, Kind: kind, LeaseTTL: r.LeaseTTL.D()}
		if !cal.IsZero() { // its window is its period's nominal width
			out[i].Calendar, out[i].Window = cal, time.Duration(cal.Width())
		}
		if err := r.popLimits(&out[i]); err != nil {
			return nil, fmt.Errorf("rules[%d].%w", i, err)
		}
	}
	if err := pop.ValidateRules(out); err != nil {
		return nil, err
	}
	return out, nil
}

// popShareRise returns share_rise as pop.Rule.ShareRise: 0 when omitted
// (the default), negative for 0 (none).
func (r Rule) popShareRise() (float64, error) {
	switch v := r.ShareRise; {
	case v == nil:
		return 0, nil
	case r.OnPartition != pop.Share.String():
		return 0, errors.New("share_rise: only for on_partition: share")
	case !(*v >= 0 && *v <= 1):
		return 0, fmt.Errorf("share_rise: must be 0 to 1 (a fraction of the limit), got %g", *v)
	case *v == 0:
		return -1, nil
	default:
		return *v, nil
	}
}
