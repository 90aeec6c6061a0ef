package config

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/identity"
)

// Shedding configures the node's load shedder: when too many requests are
// in flight on the node, proxy mode and the middleware answer requests of
// the lower priority classes 503 at once, before any rule counts them, so
// that the node and its upstream keep serving the higher ones.
//
// A request belongs to the first class whose match it meets, or else to the
// last (lowest) class. Of n classes, the first is never shed; the others
// are shed from the last up as the requests in flight rise: the last at
// max_in_flight / 2, the second at max_in_flight, those in between at even
// steps (frontend.ShedThreshold).
type Shedding struct {
	// MaxInFlight is the number of requests in flight on the node (in proxy
	// mode and the middleware, from when a request's work starts, its
	// body's first 16 KiB read, to the end of its response) at which every
	// class but the first is shed. One client address (an IPv6 /64) holds
	// at most max(1, MaxInFlight/4) of them; beyond, its requests are shed
	// whatever their class. 0, the default, turns shedding off; else 2 to
	// MaxShedInFlight, and at least two classes are needed.
	MaxInFlight int `yaml:"max_in_flight"`
	// RetryAfter is the Retry-After of a shed request's 503, in whole
	// seconds rounded up (1s to 1h). Default 1s.
	RetryAfter Duration `yaml:"retry_after"`
	// TargetLatency, when set, sheds on slowness too: the shedder keeps a
	// moving average of how long the requests that pass the rules take
	// (arrival to the end of the response, the upstream's time included)
	// and, while it is above TargetLatency, weighs the requests in flight by
	// average / target against the thresholds. 0, the default: requests in
	// flight alone. At most 1h.
	TargetLatency Duration `yaml:"target_latency"`
	// Classes are the priority classes, highest first (at most
	// MaxShedClasses). A class with an empty match takes every request and
	// must therefore be the last.
	Classes []ShedClass `yaml:"classes"`
}

// ShedClass is one priority class of the load shedder.
type ShedClass struct {
	// Name names the class in answers and metrics (identity.ValidName: 1-64
	// bytes, no '.', '*', '>', '/', '#' or white space); unique.
	Name string `yaml:"name"`
	// Match selects the requests of the class, as a rule's match does.
	Match Match `yaml:"match"`
}

// Bounds of the shedding section.
const (
	// MaxShedClasses caps shedding.classes.
	MaxShedClasses = 16
	// MaxShedInFlight caps shedding.max_in_flight.
	MaxShedInFlight = 1 << 30
	// DefaultShedRetryAfter is shedding.retry_after's default.
	DefaultShedRetryAfter = time.Second
	// maxShedRetryAfter caps shedding.retry_after and target_latency.
	maxShedRetryAfter = time.Hour
)

// Enabled reports whether the shedder sheds anything.
func (s Shedding) Enabled() bool { return s.MaxInFlight > 0 }

func (s *Shedding) validate() error {
	switch {
	case s.MaxInFlight < 0 || s.MaxInFlight == 1 || s.MaxInFlight > MaxShedInFlight:
		return fmt.Errorf("shedding.max_in_flight: must be 0 (off) or 2 to %d, got %d", MaxShedInFlight, s.MaxInFlight)
	case s.RetryAfter <= 0 || time.Duration(s.RetryAfter) > maxShedRetryAfter:
		return fmt.Errorf("shedding.retry_after: must be positive and at most %s, got %s", maxShedRetryAfter, s.RetryAfter)
	case s.TargetLatency < 0 || time.Duration(s.TargetLatency) > maxShedRetryAfter:
		return fmt.Errorf("shedding.target_latency: must be 0 (off) or positive and at most %s, got %s", maxShedRetryAfter, s.TargetLatency)
	case s.TargetLatency > 0 && s.MaxInFlight == 0:
		return fmt.Errorf("shedding.max_in_flight: required (2 to %d) when target_latency is set", MaxShedInFlight)
	case len(s.Classes) > MaxShedClasses:
		return fmt.Errorf("shedding.classes: at most %d classes, got %d", MaxShedClasses, len(s.Classes))
	case s.MaxInFlight > 0 && len(s.Classes) < 2:
		return fmt.Errorf("shedding.classes: at least two classes are needed when max_in_flight is set (the first is never shed), got %d", len(s.Classes))
	case s.MaxInFlight == 0 && len(s.Classes) > 0:
		return fmt.Errorf("shedding.max_in_flight: required (2 to %d) when classes are set", MaxShedInFlight)
	}
	seen := make(map[string]int, len(s.Classes))
	for i, c := range s.Classes {
		if err := identity.ValidName(c.Name); err != nil {
			return fmt.Errorf("shedding.classes[%d].name: %w", i, err)
		}
		if j, dup := seen[c.Name]; dup {
			return fmt.Errorf("shedding.classes[%d].name: %q already used by shedding.classes[%d]", i, c.Name, j)
		}
		seen[c.Name] = i
		if err := c.Match.validate(); err != nil {
			return fmt.Errorf("shedding.classes[%d].%w", i, err)
		}
		if c.Match.empty() && i < len(s.Classes)-1 {
			return fmt.Errorf("shedding.classes[%d].match: empty, it takes every request and shedding.classes[%d] would never be reached; put it last", i, i+1)
		}
	}
	return nil
}
