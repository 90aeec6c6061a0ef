package repl

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a Core: the settings an operator tunes and how the
// caller wires the Core in.
type Config struct {
	// Settings are the replication settings (settings.go).
	Settings
	// Node is the node core whose counts are replicated (a pop.Link).
	// Required.
	Node Node
	// EpochWait is how long the first member by name of a PoP (or a node
	// that knows no membership yet) waits to learn the PoP's epoch from the
	// others before it starts one; the other members wait to learn it (see
	// maybeStartEpoch). 0 means two flush intervals, within 10ms..1s.
	EpochWait time.Duration
	// ColdStart says the PoP's members start together, none with an epoch
	// (the simulator's start): the first member by name starts the PoP's at
	// once, as soon as it knows the membership.
	ColdStart bool
	// PoPLink, GlobalLink say which links exist: a PoP of one node has no
	// PoP link, a deployment of one PoP no global link.
	PoPLink, GlobalLink bool
	// Relay says the global link can address one PoP (KindState).
	Relay bool
	// PhaseSeed is mixed into the hashes that place the timers in their
	// intervals: the node's identity for anti-entropy, its PoP's for the
	// flush slots (the members of a PoP flush together). The simulator sets
	// it from the scenario's seed, the same for the members of a PoP.
	PhaseSeed uint64
	// SpeakDelay is how long the speaker of a flush slot waits for the other
	// members' totals before it publishes the PoP's. 0 means a tenth of the
	// flush interval.
	SpeakDelay time.Duration
}

// normalise validates c and fills its zero fields: the settings' defaults
// (Settings.WithDefaults), EpochWait and SpeakDelay from FlushInterval.
func (c *Config) normalise() error {
	if c.Node == nil {
		return errors.New("repl: config: node is required")
	}
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("repl: config: %w", err)
	}
	c.Settings = c.Settings.WithDefaults()
	if c.EpochWait == 0 {
		c.EpochWait = min(max(2*c.FlushInterval, 10*time.Millisecond), time.Second)
	}
	if c.SpeakDelay == 0 {
		c.SpeakDelay = c.FlushInterval / 10
	}
	switch {
	case c.EpochWait < 0:
		return fmt.Errorf("repl: config: epoch wait %s is negative", c.EpochWait)
	case c.FlushInterval > 0 && (c.SpeakDelay < 0 || c.SpeakDelay >= c.FlushInterval):
		return fmt.Errorf("repl: config: speak delay %s must be below flush interval %s", c.SpeakDelay, c.FlushInterval)
	}
	return nil
}
