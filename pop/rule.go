package pop

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// Mode says whether a rule denies.
type Mode uint8

// Modes.
const (
	// Enforce denies requests over the limit.
	Enforce Mode = iota
	// Shadow counts and reports what it would deny but always admits.
	Shadow
	// Off checks nothing: the rule admits every request, counts nothing
	// and never binds. Only a mode set at run time (modes.go) is Off; a
	// rule's own Mode is Enforce or Shadow.
	Off
)

func (m Mode) String() string {
	switch m {
	case Shadow:
		return "shadow"
	case Off:
		return "off"
	}
	return "enforce"
}

// ParseMode parses "enforce" or "shadow".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "enforce":
		return Enforce, nil
	case "shadow":
		return Shadow, nil
	}
	return 0, fmt.Errorf("unknown mode %q (want enforce or shadow)", s)
}

// Policy says what a rule does while some PoPs are unheard.
type Policy uint8

// Partition policies.
const (
	// Keep goes on with the local view: available, but the sides of a
	// partition may together admit up to limit x sides.
	Keep Policy = iota
	// Share makes each side enforce only its share of the limit while some
	// PoPs are unheard.
	Share
)

func (p Policy) String() string {
	if p == Share {
		return "share"
	}
	return "keep"
}

// ParsePolicy parses "keep" or "share".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "keep":
		return Keep, nil
	case "share":
		return Share, nil
	}
	return 0, fmt.Errorf("unknown partition policy %q (want keep or share)", s)
}

// MaxLimit is the largest Limit a rule may have: 2^53, below which a
// window's counts and the sliding estimate are exact in a float64, and far
// enough from 2^64 that adding up the costs of a request cannot wrap.
const MaxLimit = 1 << 53

// Rule is a named limit.
type Rule struct {
	// Name identifies the rule in requests and on the wire (1-64 bytes).
	Name string
	// Limit is the most cost admitted per sliding Window (>= 1).
	Limit uint64
	// Window is the width of the sliding window (>= 1ms, whole milliseconds).
	Window time.Duration
	// Cost is the cost of a request that names none (>= 1, <= Limit).
	Cost uint64
	// Scope says how far counts travel.
	Scope Scope
	// Mode is Enforce or Shadow.
	Mode Mode
	// OnPartition is the partition policy.
	OnPartition Policy
	// ShareRise, for OnPartition Share, is how far past its part of the
	// limit (a fraction of the limit, up to 1) a side's share may grow in a
	// cut when its demand grows by less than a whole failover shows. A
	// failover of part of the other side's traffic and a rise of demand on
	// both sides look alike from either side of a cut, so it sets both the
	// least such a failover is given and the most such a rise goes over
	// (docs/replication.md, "The room a rise could take"). 0 means
	// DefaultShareRise; negative: none.
	ShareRise float64
	// Kind is what the rule limits: Rate (the zero value: cost per sliding
	// window) or Concurrency (requests in flight per key, concurrency.go).
	Kind Kind
	// BlockFor, when non-zero, puts a key denied by the rule in the penalty
	// box for that long: every request for it is denied until then, on every
	// node the rule's scope reaches (see block.go). 0 means no penalty box.
	BlockFor time.Duration
	// OnUnsure says what the rule answers when the node cannot know the
	// key's count (see unsure.go): AllowUnsure (the default) or DenyUnsure.
	OnUnsure UnsurePolicy
	// More are further windows (limits.go): a request must fit in Limit per
	// Window and in each of these; a denied request counts in none. Empty
	// for a rule of one window.
	More []Limit
	// Overrides give keys limits of their own; they win over tiers.
	Overrides []Override
	// Tiers map a tier name, which a request names (Check.Tier), to its
	// limits; windows a tier does not name keep the rule's limit.
	Tiers map[string][]Limit
	// DefaultTier names the tier of requests that name none or an unknown
	// one; empty means the rule's own limits.
	DefaultTier string
	// LeaseTTL is how long a concurrency rule's lease holds its slots
	// unless released first, and how long a member's in-flight count
	// stands unless it is heard again; 0 means DefaultLeaseTTL. Only for
	// Kind Concurrency.
	LeaseTTL time.Duration
	// Algorithm is SlidingWindow (the default) or GCRA (gcra.go).
	Algorithm Algorithm
	// Burst is, for a GCRA rule, the most cost admitted at once (1 to
	// Limit); 0 means Limit. Must be 0 for other rules.
	Burst uint64
	// Calendar, when set, makes the rule a calendar quota (calendar.go):
	// Limit per calendar period, the whole of it available again at the
	// period's end, instead of per sliding Window. Window must then be
	// the period's nominal width, Calendar.Width(). Zero: a sliding window.
	Calendar window.Calendar
}

// Validate reports the first thing wrong with r, naming the field.
func (r Rule) Validate() error {
	if err := r.validateCalendar(); err != nil {
		return err
	}
	if r.Kind != Rate || r.LeaseTTL != 0 {
		return r.validateKind()
	}
	switch {
	case r.Name == "" || len(r.Name) > crdt.MaxRuleNameLen:
		return fmt.Errorf("name: must be 1-%d bytes, got %d", crdt.MaxRuleNameLen, len(r.Name))
	case strings.ContainsAny(r.Name, "/ \t\r\n\""):
		return fmt.Errorf("name: %q must not contain '/', quotes or white space", r.Name)
	case r.Limit < 1:
		return errors.New("limit: must be at least 1")
	case r.Limit > MaxLimit:
		return fmt.Errorf("limit: must be at most %d (2^53), got %d", uint64(MaxLimit), r.Limit)
	case r.Window < time.Millisecond || r.Window%time.Millisecond != 0:
		return fmt.Errorf("window: must be a whole number of milliseconds >= 1ms, got %s", r.Window)
	case r.Window > 30*24*time.Hour:
		return fmt.Errorf("window: must be at most 720h, got %s", r.Window)
	case r.Cost < 1:
		return errors.New("cost: must be at least 1")
	case r.Cost > r.Limit:
		return fmt.Errorf("cost: %d exceeds limit %d", r.Cost, r.Limit)
	case r.Scope > ScopeGlobal:
		return fmt.Errorf("scope: unknown scope %d", r.Scope)
	case r.Mode > Shadow:
		return fmt.Errorf("mode: unknown mode %d", r.Mode)
	case r.OnPartition > Share:
		return fmt.Errorf("on_partition: unknown policy %d", r.OnPartition)
	case r.ShareRise > 1 || math.IsNaN(r.ShareRise):
		return fmt.Errorf("share_rise: must be at most 1 (a fraction of the limit), got %g", r.ShareRise)
	case r.ShareRise > 0 && r.OnPartition != Share:
		return errors.New("share_rise: only for on_partition: share")
	case r.BlockFor < 0 || r.BlockFor%time.Millisecond != 0:
		return fmt.Errorf("block_for: must be 0 or a whole number of milliseconds, got %s", r.BlockFor)
	case r.BlockFor > MaxBlockFor:
		return fmt.Errorf("block_for: must be at most %s, got %s", MaxBlockFor, r.BlockFor)
	case r.OnUnsure > DenyUnsure:
		return fmt.Errorf("on_unsure: unknown policy %d", r.OnUnsure)
	}
	if err := r.validateGCRA(); err != nil {
		return err
	}
	return r.validateMore()
}

// shareRise returns the room of ShareRise, its default in place of 0.
func (r *Rule) shareRise() float64 {
	switch {
	case r.ShareRise < 0:
		return 0
	case r.ShareRise == 0:
		return DefaultShareRise
	}
	return r.ShareRise
}

// ValidateRules checks every rule and that names are unique. Errors name the
// rule's index and field, e.g. "rules[2].limit: must be at least 1".
func ValidateRules(rules []Rule) error {
	seen := map[string]int{}
	for i, r := range rules {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
		if j, dup := seen[r.Name]; dup {
			return fmt.Errorf("rules[%d].name: %q already used by rules[%d]", i, r.Name, j)
		}
		seen[r.Name] = i
	}
	return nil
}
