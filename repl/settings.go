package repl

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/identity"
)

// Settings are the replication settings an operator tunes: the edge
// config's replication section, the scenario files' replication section and
// the runtime's options all hold this one type, and the field names in its
// yaml tags are those sections' field names.
//
// Durations are wall-clock spans; a Core reads them against the times its
// caller passes. Start from DefaultSettings: a zero field means what its
// comment says, which is not always the default (a zero FlushInterval
// flushes at once). WithDefaults returns the values a Core runs with.
//
// A Settings is a plain value, safe to read from many goroutines.
type Settings struct {
	// FlushInterval is how often changed counts are sent. 0 means "at
	// once": the caller calls Core.Flush after every counted decision, and
	// a member's delta is passed on to other PoPs as soon as it arrives (the
	// simulator's zero-latency reference; the gossip runtime refuses it).
	// Otherwise at least 1ms. Default 50ms.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// PeerTimeout is how long a remote PoP may stay silent before it counts
	// as partitioned (unheard). 0 means the default, 2s.
	PeerTimeout time.Duration `yaml:"peer_timeout"`
	// HeartbeatInterval is how often the PoP heartbeats to the other PoPs
	// (its members take turns) and checks whom it has heard. It must be
	// below PeerTimeout. 0 means PeerTimeout/4, the default.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// AntiEntropyInterval is how often every live count is re-sent (own
	// counts to the PoP, owned totals to other PoPs); a PoP heard again is
	// sent them too. A large store's round is cut in parts of a few
	// thousand keys, sent one after the other over the first half of the
	// interval, so that it is not one burst of work every interval. At
	// least FlushInterval. 0 means the default, 5s.
	AntiEntropyInterval time.Duration `yaml:"anti_entropy_interval"`
	// ExpectedPoPs lists other PoPs ("region/pop") known in advance: each
	// counts as partitioned until first heard, so a node that starts while
	// cut off knows whom it misses. When the list is set, only these PoPs
	// count as partitioned: others are replicated when heard, but their
	// silence cuts no share (a message on an invented PoP's subject cannot
	// cut the share policy's limits). At a start the fleet clock waits for
	// them too, for at most PeerTimeout (fleetclock.go). The node's own PoP
	// is ignored. Empty (the default): every PoP heard counts.
	ExpectedPoPs []string `yaml:"expected_pops"`
	// ForgetAfter is how long a remote PoP that is not expected may stay
	// silent before it is forgotten (from the unheard set, status and
	// metrics). It must be above PeerTimeout. 0 means the default: 10m, or
	// twice PeerTimeout if that is longer.
	ForgetAfter time.Duration `yaml:"forget_after"`
	// MaxPoPs caps the remote PoPs tracked; messages from PoPs beyond it
	// are dropped and counted. 0 means the default, 4096.
	MaxPoPs int `yaml:"max_pops"`
	// SyncInterval paces the work other PoPs can ask for: re-sends of the
	// owned totals asked for from outside the PoP (sync requests, PoPs
	// heard first or again) go out at most once per interval, and relays of
	// the former epochs held to a PoP that asked at most once per interval
	// too, however many nodes or PoPs ask: requests within one interval
	// share its answer. 0 means the default, 250ms.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// NearLimitAllowance splits the headroom near a limit among the nodes
	// while their admits are unseen by the others, so that replication lag
	// does not let a hot key overshoot. nil (the default) means true; false
	// turns it off: a node decides on its estimate alone, near a limit too.
	NearLimitAllowance *bool `yaml:"near_limit_allowance"`
	// StartupSync bounds how long a node waits at start for its PoP's and
	// the expected PoPs' view of what its former incarnations counted:
	// meanwhile it decides on the view it has, counts as unsynced
	// (pop.Link.SetSynced) and the daemon's /readyz answers 503. Without
	// ExpectedPoPs it waits the whole span. 0 (the default here) turns the
	// wait off; the daemon's default is DefaultStartupSync.
	StartupSync time.Duration `yaml:"startup_sync"`
	// MaxBatchEntries is the batch size cap, in keys: when this many keys
	// changed since the last flush, the changes are sent without waiting
	// for FlushInterval. 0 means the default, 32768.
	MaxBatchEntries int `yaml:"max_batch_entries"`
	// SparseUpdates publishes a PoP total of a key far below its limit only
	// when it has moved by a step of limit / (4 x PoPs) since it was last
	// published, and every change of a key at a quarter of its limit or
	// above, for global rules of one window at least 8 times the lag of a
	// change (replicated.SparseStep; docs/replication.md states the bound). What
	// is left out goes with the next anti-entropy round. nil (the default)
	// means true; false publishes every change.
	SparseUpdates *bool `yaml:"sparse_updates"`
	// RegionVoices sends a region's totals to the other regions through
	// one PoP of the region, its voice, as one aggregate per key (the sum
	// of the region's PoP totals) instead of every PoP's total: a node's
	// inbound then grows with the PoPs of its region plus the number of
	// regions. A PoP's own totals still reach the PoPs of its region.
	// Every node of the fleet must agree on it. nil (the default) chooses
	// by the fleet's shape (Settings.Voices): on for a fleet of at least
	// AutoVoicesPoPs PoPs in two regions or more named by ExpectedPoPs,
	// off otherwise.
	RegionVoices *bool `yaml:"region_voices"`
}

// AutoVoicesPoPs is the fleet size from which region voices are on by
// default: below it, every PoP's totals reaching every PoP costs a node
// less than what the extra hop through a region's voice costs accuracy
// (docs/replication.md#region-voices has both measured).
const AutoVoicesPoPs = 48

// Voices reports whether region voices are on for a node of PoP self:
// RegionVoices when set; else whether ExpectedPoPs, with self, names at
// least AutoVoicesPoPs PoPs in two regions or more. Every node of a fleet
// configured with the same PoP list chooses alike; a fleet that names no
// PoPs has them off unless set.
func (s Settings) Voices(self identity.PoPID) bool {
	on, _ := s.VoicesChosen(self)
	return on
}

// VoicesChosen is Voices, with how it was chosen: "set", or the fleet's
// shape ("fleet of 100 PoPs in 10 regions").
func (s Settings) VoicesChosen(self identity.PoPID) (bool, string) {
	if s.RegionVoices != nil {
		return *s.RegionVoices, "set"
	}
	pops := map[identity.PoPID]bool{self: true}
	regions := map[string]bool{self.Region: true}
	for _, e := range s.ExpectedPoPs {
		if p, err := identity.ParsePoPID(e); err == nil {
			pops[p] = true
			regions[p.Region] = true
		}
	}
	return len(pops) >= AutoVoicesPoPs && len(regions) >= 2, fmt.Sprintf("fleet of %s in %s", count(len(pops), "PoP"), count(len(regions), "region"))
}

// count returns n and noun, in the plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Defaults that zero fields stand for (see Settings).
const (
	DefaultFlushInterval       = 50 * time.Millisecond
	DefaultPeerTimeout         = 2 * time.Second
	DefaultAntiEntropyInterval = 5 * time.Second
	DefaultForgetAfter         = 10 * time.Minute
	DefaultMaxPoPs             = 4096
	DefaultSyncInterval        = 250 * time.Millisecond
	DefaultMaxBatchEntries     = 32768
	// DefaultStartupSync is the daemon's startup_sync: a node of a
	// deployment restarts into a fleet that holds its former counts. A
	// Core's default is no wait.
	DefaultStartupSync = 5 * time.Second
)

// DefaultSettings returns a fresh Settings holding every default: the
// fields whose default is not their zero value are set.
func DefaultSettings() Settings {
	return Settings{
		FlushInterval:       DefaultFlushInterval,
		PeerTimeout:         DefaultPeerTimeout,
		AntiEntropyInterval: DefaultAntiEntropyInterval,
		ForgetAfter:         DefaultForgetAfter,
		MaxPoPs:             DefaultMaxPoPs,
		SyncInterval:        DefaultSyncInterval,
		MaxBatchEntries:     DefaultMaxBatchEntries,
	}
}

// WithDefaults returns s with every zero field that stands for a default
// (see Settings) set to it; FlushInterval, ExpectedPoPs,
// NearLimitAllowance, StartupSync and SparseUpdates are kept as they are. s is not
// changed. Negative values are kept for Validate to report.
func (s Settings) WithDefaults() Settings {
	if s.PeerTimeout == 0 {
		s.PeerTimeout = DefaultPeerTimeout
	}
	if s.HeartbeatInterval == 0 {
		s.HeartbeatInterval = s.PeerTimeout / 4
	}
	if s.AntiEntropyInterval == 0 {
		s.AntiEntropyInterval = DefaultAntiEntropyInterval
	}
	if s.ForgetAfter == 0 {
		s.ForgetAfter = max(DefaultForgetAfter, 2*s.PeerTimeout)
	}
	if s.MaxPoPs == 0 {
		s.MaxPoPs = DefaultMaxPoPs
	}
	if s.SyncInterval == 0 {
		s.SyncInterval = DefaultSyncInterval
	}
	if s.MaxBatchEntries == 0 {
		s.MaxBatchEntries = DefaultMaxBatchEntries
	}
	return s
}

// Allowance reports whether the near-limit allowance is on
// (NearLimitAllowance unset or true).
func (s Settings) Allowance() bool {
	return s.NearLimitAllowance == nil || *s.NearLimitAllowance
}

// Sparse reports whether sparse updates are on (SparseUpdates unset or
// true).
func (s Settings) Sparse() bool {
	return s.SparseUpdates == nil || *s.SparseUpdates
}

// Validate reports the first thing wrong with s once its defaults are
// filled in (WithDefaults). The error starts with the field's YAML name, as
// in "peer_timeout: must be positive, got -1s"; a caller that holds s under
// a section prefixes it ("replication.%w").
func (s Settings) Validate() error {
	r := s.WithDefaults()
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"flush_interval", r.FlushInterval},
		{"startup_sync", r.StartupSync},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s: must not be negative, got %s", d.name, d.v)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"peer_timeout", r.PeerTimeout},
		{"heartbeat_interval", r.HeartbeatInterval},
		{"anti_entropy_interval", r.AntiEntropyInterval},
		{"forget_after", r.ForgetAfter},
		{"sync_interval", r.SyncInterval},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s: must be positive, got %s", d.name, d.v)
		}
	}
	switch {
	case r.FlushInterval > 0 && r.FlushInterval < time.Millisecond:
		return fmt.Errorf("flush_interval: want 0 (at once) or at least 1ms, got %s", r.FlushInterval)
	case r.AntiEntropyInterval < r.FlushInterval:
		return fmt.Errorf("anti_entropy_interval: %s is below flush_interval %s", r.AntiEntropyInterval, r.FlushInterval)
	case r.HeartbeatInterval >= r.PeerTimeout:
		return fmt.Errorf("heartbeat_interval: %s must be below peer_timeout %s", r.HeartbeatInterval, r.PeerTimeout)
	case r.ForgetAfter <= r.PeerTimeout:
		return fmt.Errorf("forget_after: %s must be above peer_timeout %s", r.ForgetAfter, r.PeerTimeout)
	case r.MaxPoPs < 1:
		return fmt.Errorf("max_pops: must be at least 1, got %d", r.MaxPoPs)
	case r.MaxBatchEntries < 1:
		return fmt.Errorf("max_batch_entries: must be at least 1, got %d", r.MaxBatchEntries)
	}
	for i, p := range r.ExpectedPoPs {
		if _, err := identity.ParsePoPID(p); err != nil {
			return fmt.Errorf("expected_pops[%d]: %w", i, err)
		}
	}
	return nil
}

// expectedPoPs returns ExpectedPoPs parsed; s must be valid.
func (s *Settings) expectedPoPs() []identity.PoPID {
	out := make([]identity.PoPID, 0, len(s.ExpectedPoPs))
	for _, p := range s.ExpectedPoPs {
		id, _ := identity.ParsePoPID(p)
		out = append(out, id)
	}
	return out
}
