package pop

import (
	"errors"
	"fmt"
	"time"
)

// Concurrency limits.
//
// A rule of Kind Concurrency limits the requests in flight per key: Limit
// slots, of which a check takes Cost (1 by default). A check that fits
// acquires its slots and its Result carries a Lease; Release gives them
// back. A lease not released is given back at its TTL (Rule.LeaseTTL), so
// a client that crashed holding one cannot keep its slots; a pinned lease
// (Check.Pin: a request the node itself proxies while it is in flight) is
// never expired and must be released.
//
// Checks of a concurrency rule go through the one pipeline, DecideChecks,
// with the other rules' checks: of an all-or-nothing request the slots are
// judged with the other checks and acquired only when every check fits;
// slots acquired for a request that ends denied (a race lost after the
// judging) are given back before DecideChecks returns. A probe judges
// without acquiring. A shadow rule acquires a slot when one is free and
// otherwise admits the request holding none (ShadowDenied). Idempotency
// keys do not apply: a retry is another request in flight.
//
// Scope node counts this node's leases only. Scope pop adds the in-flight
// counts of the PoP's members (inflight.go): each node sends its own count
// of a key as an absolute value with a version, the newer value wins, and
// a member's count stands for LeaseTTL after it was last heard (a holder
// re-sends its counts well within that) or until the member leaves the
// PoP's membership: a node that dies holding slots gives them back within
// LeaseTTL, sooner when the membership sees it go. Scope global is refused:
// in-flight counts travel only inside a PoP.
//
// Memory: at most Config.MaxLeases leases (own) and as many members'
// counts are held, about LeaseBytes and PeerCountBytes each plus the key;
// when the leases are full a check that would acquire is denied
// (Decision.Untracked), and a member's count that does not fit is refused
// (counted in ApplyStats.Inflight.Refused).

// Kind says what a rule limits.
type Kind uint8

// Rule kinds.
const (
	// Rate limits the cost admitted per sliding window.
	Rate Kind = iota
	// Concurrency limits the requests in flight per key.
	Concurrency
)

var kindNames = [...]string{"rate", "concurrency"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// ParseKind parses "rate" or "concurrency"; empty is Rate.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return Rate, nil
	}
	for i, n := range kindNames {
		if s == n {
			return Kind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown kind %q (want rate or concurrency)", s)
}

// DefaultLeaseTTL is the lease TTL of a concurrency rule that names none.
const DefaultLeaseTTL = time.Minute

// Bounds of Rule.LeaseTTL and of a concurrency rule's Limit.
const (
	MinLeaseTTL    = time.Second
	MaxLeaseTTL    = 24 * time.Hour
	MaxConcurrency = 1_000_000
)

// ConcurrencyRetry is the wait a denied concurrency check is told to
// retry after (Decision.RetryAfter): when a slot frees depends on requests
// in flight, which nothing can foresee.
const ConcurrencyRetry = time.Second

// ErrConcurrencyRule is a rate decision (Decide, Peek and their Handle
// forms) asked of a concurrency rule, or an acquisition of a rate rule:
// concurrency rules are decided by DecideChecks, which returns leases.
var ErrConcurrencyRule = errors.New("pop: wrong kind of rule: concurrency rules are decided by DecideChecks, rate rules hold no lease")

// leaseTTL is the rule's lease TTL, in nanoseconds.
func (r *Rule) leaseTTL() int64 {
	if r.LeaseTTL == 0 {
		return int64(DefaultLeaseTTL)
	}
	return int64(r.LeaseTTL)
}

// validateKind validates a rule that is not a plain rate rule: a kind
// beyond Rate, or a lease TTL.
func (r Rule) validateKind() error {
	switch {
	case r.Kind > Concurrency:
		return fmt.Errorf("kind: unknown kind %d", r.Kind)
	case r.Kind == Rate:
		return errors.New("lease_ttl: only a concurrency rule has leases")
	case r.Window != 0:
		return errors.New("window: a concurrency rule has no window: its limit is requests in flight")
	case r.Algorithm != SlidingWindow || r.Burst != 0:
		return errors.New("algorithm: a concurrency rule counts requests in flight, with no algorithm or burst of its own")
	case len(r.More) > 0:
		return errors.New("limits: a concurrency rule has one limit, of requests in flight")
	case len(r.Overrides) > 0:
		return errors.New("overrides: not supported for a concurrency rule")
	case len(r.Tiers) > 0 || r.DefaultTier != "":
		return errors.New("tiers: not supported for a concurrency rule")
	case r.OnPartition == Share:
		return errors.New("on_partition: share needs a rate rule's window of traffic; a concurrency rule keeps its PoP's counts")
	case r.BlockFor != 0:
		return errors.New("block_for: not supported for a concurrency rule")
	case r.OnUnsure == DenyUnsure:
		return errors.New("on_unsure: not supported for a concurrency rule (it denies when its lease table is full)")
	case r.Scope == ScopeGlobal:
		return errors.New("scope: global is not supported for a concurrency rule: in-flight counts travel only inside a PoP, where a member's death is seen; use node or pop")
	case r.Limit > MaxConcurrency:
		return fmt.Errorf("limit: at most %d requests in flight, got %d", MaxConcurrency, r.Limit)
	case r.LeaseTTL != 0 && (r.LeaseTTL < MinLeaseTTL || r.LeaseTTL > MaxLeaseTTL || r.LeaseTTL%time.Millisecond != 0):
		return fmt.Errorf("lease_ttl: must be a whole number of milliseconds from %s to %s, got %s", MinLeaseTTL, MaxLeaseTTL, r.LeaseTTL)
	}
	// The fields every rule has (name, limit, cost, scope, mode) are
	// validated as a rate rule's.
	base := r
	base.Kind, base.Window, base.LeaseTTL = Rate, time.Second, 0
	return base.Validate()
}
