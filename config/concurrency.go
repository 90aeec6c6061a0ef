package config

import (
	"errors"
	"fmt"

	"github.com/geolimit/geolimit/pop"
)

// Concurrency rules (kind: concurrency): limit is the requests in flight
// per key. Proxy mode and the middleware hold a slot while a request is
// in flight; the API hands out leases (POST /v1/acquire, /v1/release)
// that end at lease_ttl unless released first.

// concurrencyDefaults fills a concurrency rule's omitted scope (pop: its
// counts travel no further than the PoP) and lease_ttl
// (pop.DefaultLeaseTTL). It leaves other rules alone.
func concurrencyDefaults(r *Rule) {
	if r.Kind != pop.Concurrency.String() {
		return
	}
	if r.Scope == "" {
		r.Scope = pop.ScopePoP.String()
	}
	if r.LeaseTTL == 0 {
		r.LeaseTTL = Duration(pop.DefaultLeaseTTL)
	}
}

// popKind parses the rule's kind and refuses the fields its kind does not
// have. Errors name the field below the rule.
func (r *Rule) popKind() (pop.Kind, error) {
	k, err := pop.ParseKind(r.Kind)
	if err != nil {
		return 0, fmt.Errorf("kind: %w", err)
	}
	if k != pop.Concurrency {
		if r.LeaseTTL != 0 {
			return 0, errors.New("lease_ttl: only for kind: concurrency")
		}
		return k, nil
	}
	switch {
	case r.Window != 0:
		return 0, errors.New("window: kind: concurrency has no window: limit is the requests in flight per key")
	case len(r.Limits) > 0:
		return 0, errors.New("limits: kind: concurrency has one limit, of requests in flight per key")
	case r.Algorithm != "" || r.Burst != 0:
		return 0, errors.New("algorithm: kind: concurrency counts requests in flight, with no algorithm or burst of its own")
	case len(r.Overrides) > 0:
		return 0, errors.New("overrides: not supported for kind: concurrency")
	case r.Tier != "" || len(r.Tiers) > 0 || r.DefaultTier != "":
		return 0, errors.New("tiers: not supported for kind: concurrency")
	case r.BlockFor != 0:
		return 0, errors.New("block_for: not supported for kind: concurrency")
	case r.OnPartition == pop.Share.String():
		return 0, errors.New("on_partition: share needs a rate rule's window of traffic; kind: concurrency keeps its PoP's counts")
	case r.OnUnsure == "deny":
		return 0, errors.New("on_unsure: deny is not supported for kind: concurrency (it denies when its lease table is full)")
	case r.Scope == pop.ScopeGlobal.String():
		return 0, errors.New("scope: global is not supported for kind: concurrency: in-flight counts travel only inside a PoP, where a member that dies holding slots is seen to go; use node or pop")
	}
	return k, nil
}

// isConcurrency reports whether the rule called name is kind: concurrency.
func (c *Config) isConcurrency(name string) bool {
	for i := range c.Rules {
		if c.Rules[i].Name == name {
			return c.Rules[i].Kind == pop.Concurrency.String()
		}
	}
	return false
}
