package pop

import (
	"fmt"
	"time"
)

// Failing closed.
//
// A node is unsure of a key's count when it cannot track a new key (the
// store is full: Decision.Untracked), when it has not yet learnt its former
// incarnations' counts after a start (SetSynced(false); pop and global scope
// only), and, for a share rule during a partition, when the key has no
// history to derive this side's share from. By default (AllowUnsure) such a
// request is decided as usual, as a key with no history: the limiter does
// not become the outage. A rule with DenyUnsure denies it instead, counts
// nothing and says why (Decision.Unsure): the choice for limits that guard
// against abuse (logins, one-time codes) rather than for availability.

// UnsurePolicy says what a rule answers when the node is unsure of a key's
// count.
type UnsurePolicy uint8

// Unsure policies.
const (
	// AllowUnsure decides as for a key with no history (fail open).
	AllowUnsure UnsurePolicy = iota
	// DenyUnsure denies (fail closed).
	DenyUnsure
)

func (p UnsurePolicy) String() string {
	if p == DenyUnsure {
		return "deny"
	}
	return "allow"
}

// ParseUnsurePolicy parses "allow" or "deny".
func ParseUnsurePolicy(s string) (UnsurePolicy, error) {
	switch s {
	case "allow":
		return AllowUnsure, nil
	case "deny":
		return DenyUnsure, nil
	}
	return 0, fmt.Errorf("unknown policy %q (want allow or deny)", s)
}

// Unsure is why a DenyUnsure rule denied a request; UnsureNone for any other
// decision.
type Unsure uint8

// Reasons for an unsure denial.
const (
	UnsureNone Unsure = iota
	// UnsureStoreFull: the key is new and the store has no room to track it.
	UnsureStoreFull
	// UnsureNotSynced: the node has not learnt its former counts since it
	// started (pop and global scope).
	UnsureNotSynced
	// UnsureNoHistory: a share rule during a partition, and the key has no
	// count from before the cut to derive this side's share from.
	UnsureNoHistory
)

var unsureNames = [...]string{"", "store_full", "not_synced", "no_history"}

// String returns the reason as the API reports it: "store_full",
// "not_synced", "no_history", or "" for none.
func (u Unsure) String() string {
	if int(u) < len(unsureNames) {
		return unsureNames[u]
	}
	return fmt.Sprintf("Unsure(%d)", u)
}

// UnsureReasons lists the reasons (not UnsureNone), for metrics.
func UnsureReasons() []Unsure { return []Unsure{UnsureStoreFull, UnsureNotSynced, UnsureNoHistory} }

// unsureRetry is the Retry-After of an unsure denial: how soon asking again
// may find the node sure (a sync done, room in the store, the partition
// over), capped by the rule's window.
const unsureRetry = time.Second

// unsureDecision is a DenyUnsure rule's denial for reason: nothing counted.
func unsureDecision(r *ruleState, reason Unsure) Decision {
	retry := min(unsureRetry, time.Duration(r.width))
	return Decision{Limit: r.Limit, Unsure: reason, RetryAfter: retry, Reset: retry}
}

// notSynced reports whether a DenyUnsure rule must deny for want of the
// node's former counts.
func (n *Node) notSynced(r *ruleState) bool {
	return r.OnUnsure == DenyUnsure && r.Scope != ScopeNode && !n.Synced()
}
