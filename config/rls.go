package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// RLS configures the Envoy rate limit service (envoy.service.ratelimit.v3,
// served on listen.grpc): which rule and key each descriptor of a domain
// maps to.
type RLS struct {
	// Insecure lets listen.grpc listen beyond loopback without
	// api.token_file: whoever reaches the port can spend counts.
	Insecure bool `yaml:"insecure"`
	// Domains map each domain's descriptors to rules. A domain not listed
	// is answered OK without limits.
	Domains []RLSDomain `yaml:"domains"`
}

// RLSDomain maps the descriptors of one rate limit domain to rules.
type RLSDomain struct {
	// Domain is the domain Envoy names in its requests (its rate limit
	// filter's domain). Required, unique.
	Domain string `yaml:"domain"`
	// Descriptors are the descriptor shapes of the domain and their rules.
	Descriptors []RLSDescriptor `yaml:"descriptors"`
}

// RLSDescriptor maps one descriptor shape to a rule.
type RLSDescriptor struct {
	// Entries are the descriptor's entries in order: "key" matches an entry
	// of that key with any non-empty value, "key=value" only that value. A
	// descriptor matches when it has exactly these entries in this order;
	// the values of all its entries, joined by '|', form the key counted.
	Entries []string `yaml:"entries"`
	// Rule names the rule counted (one of rules). Required.
	Rule string `yaml:"rule"`
	// Tier is the key of one of Entries (without a fixed value) whose value
	// names the request's tier of the rule's tiers; that entry is left out
	// of the key counted. Empty: the descriptor names no tier.
	Tier string `yaml:"tier"`
	// IdempotencyKey is the key of one of Entries (without a fixed value)
	// whose value is the request's idempotency key (see Idempotency); that
	// entry is left out of the key counted. Empty: the descriptor carries
	// none.
	IdempotencyKey string `yaml:"idempotency_key"`
}

// RLSEntry is one parsed entry of RLSDescriptor.Entries.
type RLSEntry struct {
	// Key is the descriptor entry's key.
	Key string
	// Value is the value the entry must have; empty when any will do.
	Value string
}

// ParseRLSEntry parses "key" or "key=value" (split at the first '=', so a
// value may hold '=').
func ParseRLSEntry(s string) (RLSEntry, error) {
	k, v, fixed := strings.Cut(s, "=")
	switch {
	case k == "":
		return RLSEntry{}, fmt.Errorf("%q: the key must not be empty (want key or key=value)", s)
	case fixed && v == "":
		return RLSEntry{}, fmt.Errorf("%q: the value after '=' must not be empty (write just the key to match any value)", s)
	}
	return RLSEntry{Key: k, Value: v}, nil
}

// validateRLS checks listen.grpc and the rls section: the listener's
// address and protection, every domain and descriptor, and that each
// descriptor names one of the rules.
func (c *Config) validateRLS() error {
	if c.Listen.GRPC != "" {
		if err := checkAddr(c.Listen.GRPC, false); err != nil {
			return fmt.Errorf("listen.grpc: %w", err)
		}
		if len(c.RLS.Domains) == 0 {
			return errors.New("rls.domains: required when listen.grpc is set (map each domain's descriptors to rules)")
		}
		if !c.API.HasTokens() && !c.RLS.Insecure && !IsLoopback(c.Listen.GRPC) {
			return fmt.Errorf("api.token_file: required when listen.grpc %s listens beyond loopback (or api.tokens with the scope decide; the rate limit service takes the API's bearer tokens in the gRPC metadata \"authorization\"; generate a token with: %s > api-token), or write rls.insecure: true", c.Listen.GRPC, GenerateKeyHint)
		}
	}
	rules := make([]string, len(c.Rules))
	for i, r := range c.Rules {
		rules[i] = r.Name
	}
	seen := map[string]int{}
	for i, d := range c.RLS.Domains {
		at := fmt.Sprintf("rls.domains[%d]", i)
		if d.Domain == "" {
			return fmt.Errorf("%s.domain: required", at)
		}
		if j, dup := seen[d.Domain]; dup {
			return fmt.Errorf("%s.domain: %q already used by rls.domains[%d]", at, d.Domain, j)
		}
		seen[d.Domain] = i
		if len(d.Descriptors) == 0 {
			return fmt.Errorf("%s.descriptors: at least one required", at)
		}
		shapes := map[string]int{}
		for j, ds := range d.Descriptors {
			at := fmt.Sprintf("%s.descriptors[%d]", at, j)
			if len(ds.Entries) == 0 {
				return fmt.Errorf("%s.entries: at least one required (descriptor keys in order, e.g. [remote_address])", at)
			}
			var shape strings.Builder
			for k, e := range ds.Entries {
				pe, err := ParseRLSEntry(e)
				if err != nil {
					return fmt.Errorf("%s.entries[%d]: %w", at, k, err)
				}
				fmt.Fprintf(&shape, "%q=%q,", pe.Key, pe.Value)
			}
			if k, dup := shapes[shape.String()]; dup {
				return fmt.Errorf("%s.entries: same entries as %s.descriptors[%d]", at, fmt.Sprintf("rls.domains[%d]", i), k)
			}
			shapes[shape.String()] = j
			switch {
			case ds.Rule == "":
				return fmt.Errorf("%s.rule: required", at)
			case !slices.Contains(rules, ds.Rule):
				return fmt.Errorf("%s.rule: unknown rule %q (rules: %s)", at, ds.Rule, strings.Join(rules, ", "))
			}
			if c.isConcurrency(ds.Rule) {
				return fmt.Errorf("%s.rule: %q is kind: concurrency; the rate limit service cannot hold a slot while Envoy's request is in flight", at, ds.Rule)
			}
			if err := c.checkRLSTier(ds); err != nil {
				return fmt.Errorf("%s.tier: %w", at, err)
			}
			if err := checkRLSIdempotencyKey(ds); err != nil {
				return fmt.Errorf("%s.idempotency_key: %w", at, err)
			}
		}
	}
	return nil
}

// checkRLSTier checks a descriptor's tier: the key of one of its entries,
// without a fixed value, not its only entry, of a rule with tiers.
func (c *Config) checkRLSTier(ds RLSDescriptor) error {
	if ds.Tier == "" {
		return nil
	}
	for _, r := range c.Rules {
		if r.Name == ds.Rule && len(r.Tiers) == 0 {
			return fmt.Errorf("rule %q has no tiers", ds.Rule)
		}
	}
	if len(ds.Entries) < 2 {
		return fmt.Errorf("%q: the descriptor needs another entry to form the key", ds.Tier)
	}
	n := 0
	for _, e := range ds.Entries {
		if pe, err := ParseRLSEntry(e); err == nil && pe.Key == ds.Tier {
			if pe.Value != "" {
				return fmt.Errorf("%q: the tier entry must not have a fixed value", ds.Tier)
			}
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%q is not the key of exactly one of entries", ds.Tier)
	}
	return nil
}

// checkRLSIdempotencyKey checks a descriptor's idempotency_key: the key of
// exactly one of its entries, without a fixed value, not the tier's, and
// leaving another entry to form the key.
func checkRLSIdempotencyKey(ds RLSDescriptor) error {
	k := ds.IdempotencyKey
	if k == "" {
		return nil
	}
	if k == ds.Tier {
		return fmt.Errorf("%q: also the tier's entry", k)
	}
	others := 0
	n := 0
	for _, e := range ds.Entries {
		pe, err := ParseRLSEntry(e)
		switch {
		case err != nil:
			continue
		case pe.Key == k:
			if pe.Value != "" {
				return fmt.Errorf("%q: the idempotency key's entry must not have a fixed value", k)
			}
			n++
		case pe.Key != ds.Tier:
			others++
		}
	}
	if n != 1 {
		return fmt.Errorf("%q is not the key of exactly one of entries", k)
	}
	if others == 0 {
		return fmt.Errorf("%q: the descriptor needs another entry to form the key", k)
	}
	return nil
}
