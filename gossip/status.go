package gossip

import (
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

type transportCounters struct {
	name                               string
	msgsSent, bytesSent, entriesSent   atomic.Uint64
	msgsRecv, bytesRecv, entriesRecv   atomic.Uint64
	sendErrors, decodeErrors, dropped  atomic.Uint64
	unknownSections                    atomic.Uint64
	rejected, forged, stateEntries     atomic.Uint64
	lagCount, lagSumNanos, lagMaxNanos atomic.Uint64
}

func (c *transportCounters) observeLag(lag time.Duration) {
	if lag < 0 {
		lag = 0 // clocks of sender and receiver disagree
	}
	c.lagCount.Add(1)
	c.lagSumNanos.Add(uint64(lag))
	for {
		m := c.lagMaxNanos.Load()
		if uint64(lag) <= m || c.lagMaxNanos.CompareAndSwap(m, uint64(lag)) {
			return
		}
	}
}

// TransportStats are one transport's cumulative counters.
type TransportStats struct {
	// Transport is "memberlist", "nats" or "hub".
	Transport string `json:"transport"`
	// Scope is "pop" (the own PoP's members), "global" (other PoPs) or
	// "region" (the region link, with region voices on: regions' totals,
	// and modes and penalty blocks for every PoP; it shares the global
	// transport).
	Scope string `json:"scope"`
	// MessagesSent, BytesSent: delta and heartbeat messages published.
	MessagesSent uint64 `json:"messages_sent"`
	BytesSent    uint64 `json:"bytes_sent"`
	// EntriesSent: key counts sent (one per key and window per send).
	EntriesSent uint64 `json:"entries_sent"`
	// MessagesReceived, BytesReceived: messages handed over by the transport.
	MessagesReceived uint64 `json:"messages_received"`
	BytesReceived    uint64 `json:"bytes_received"`
	// EntriesReceived: entries of well-formed deltas applied (or refused).
	EntriesReceived uint64 `json:"entries_received"`
	// SendErrors: messages the transport refused or could not send.
	SendErrors uint64 `json:"send_errors"`
	// DecodeErrors: received messages that were not a valid delta.
	DecodeErrors uint64 `json:"decode_errors"`
	// UnknownSections: sections of kinds this version does not know (a
	// newer peer's feature), skipped whole in well-formed messages.
	UnknownSections uint64 `json:"unknown_sections"`
	// Dropped: received messages dropped because the queue was full.
	Dropped uint64 `json:"dropped"`
	// Rejected: entries refused: sender not of the message's PoP, unknown
	// rule, wrong scope (a pop rule from another PoP), bad key.
	Rejected uint64 `json:"rejected_entries"`
	// Forged: messages whose sender is not of the PoP they came from.
	Forged uint64 `json:"forged_messages"`
	// StateEntries: entries merged from push/pull state sync (memberlist).
	StateEntries uint64 `json:"state_entries"`
	// LagCount, LagSum, LagMax: receive time minus the sender's flush time.
	LagCount uint64        `json:"lag_count"`
	LagSum   time.Duration `json:"lag_sum_ns"`
	LagMax   time.Duration `json:"lag_max_ns"`
}

// RemotePoP is what a node knows of another PoP's reachability.
type RemotePoP struct {
	identity.PoPID
	// LastHeard is when the last message from it arrived; zero if never.
	LastHeard time.Time `json:"last_heard"`
	// Age is the time since LastHeard (-1 if never heard).
	Age time.Duration `json:"age_ns"`
	// Partitioned: silent for longer than PeerTimeout (or never heard).
	Partitioned bool `json:"partitioned"`
	// Epoch is the latest epoch of its PoP totals seen (0: none yet).
	Epoch uint64 `json:"epoch"`
	// Expected: named in Options.ExpectedPoPs.
	Expected bool `json:"expected"`
	// Counted: counts from it were merged (it has a traffic share).
	Counted bool `json:"counted"`
}

// Status is a Replicator's state for the status page.
type Status struct {
	// Self is the node's replica identity, region/pop/node#incarnation.
	Self string `json:"self"`
	// Members are the own PoP's other live members.
	Members []string `json:"members"`
	// RemotePoPs are the other PoPs, sorted, heard or expected.
	RemotePoPs []RemotePoP `json:"remote_pops"`
	// Partitioned lists the remote PoPs counted as partitioned (region/pop).
	Partitioned []string `json:"partitioned"`
	// Transports are per-transport counters, pop first, then global, then
	// (with region voices on) region.
	Transports []TransportStats `json:"transports"`
	// Resyncs counts anti-entropy rounds triggered by a join, a reconnect or
	// a PoP heard again (periodic ones excluded).
	Resyncs uint64 `json:"resyncs"`
	// Epoch is the PoP epoch this node publishes its PoP's totals under
	// (0: not known yet).
	Epoch uint64 `json:"epoch"`
	// RegionVoices: region voices are on for this node (set, or chosen by
	// the fleet's shape: repl.Settings.Voices).
	RegionVoices bool `json:"region_voices"`
	// RegionVoice: this node's PoP speaks for its region (region voices on,
	// repl.Core.RegionVoice); RegionEpoch is the region epoch its region's
	// totals go under (0: not known yet, or region voices off).
	RegionVoice bool   `json:"region_voice"`
	RegionEpoch uint64 `json:"region_epoch"`
	// Startup is where the startup sync stands.
	Startup repl.StartupState `json:"startup_sync"`
	// Drift is, per remote PoP heard, its estimated clock offset and its
	// global rules that differ from this node's.
	Drift []repl.PeerDrift `json:"drift"`
	// ClockCorrection is what this node adds to its clock to decide on the
	// fleet clock agreed from the drift offsets (repl.Core.ClockCorrection;
	// 0 while the clocks agree within 250ms).
	ClockCorrection time.Duration `json:"clock_correction_ns"`
	// Protocol are the replication protocol's counters.
	Protocol repl.Stats `json:"protocol"`
	// QueuedBytes is what waits in the receive queue now; QueuedBytesPeak the
	// most it has held (at most Options.QueueBytes).
	QueuedBytes     int64 `json:"queued_bytes"`
	QueuedBytesPeak int64 `json:"queued_bytes_peak"`
	// FlushInterval and PeerTimeout are the configured intervals.
	FlushInterval time.Duration `json:"flush_interval_ns"`
	PeerTimeout   time.Duration `json:"peer_timeout_ns"`
}

// RemotePoPs returns every other PoP heard so far or expected, sorted by
// region and PoP, with its last-heard time and whether it counts as
// partitioned now (silent for longer than PeerTimeout, or never heard).
func (r *Replicator) RemotePoPs() []RemotePoP {
	now := r.clk.Now()
	r.mu.Lock()
	ps := r.core.RemotePoPs(now)
	r.mu.Unlock()
	out := make([]RemotePoP, 0, len(ps))
	for _, p := range ps {
		rp := RemotePoP{PoPID: p.PoPID, Age: -1, Partitioned: p.Partitioned, Epoch: p.Epoch, Expected: p.Expected, Counted: p.Counted}
		if p.LastHeard != 0 {
			rp.LastHeard = time.Unix(0, p.LastHeard)
			rp.Age = time.Duration(now - p.LastHeard)
		}
		out = append(out, rp)
	}
	return out
}

// Partitioned returns the remote PoPs counted as partitioned now, sorted:
// silent for longer than PeerTimeout, or expected and never heard. Nil when
// every known PoP is heard.
func (r *Replicator) Partitioned() []identity.PoPID {
	var out []identity.PoPID
	for _, p := range r.RemotePoPs() {
		if p.Partitioned {
			out = append(out, p.PoPID)
		}
	}
	return out
}

// Heard returns the remote PoPs heard within PeerTimeout, sorted.
func (r *Replicator) Heard() []identity.PoPID {
	var out []identity.PoPID
	for _, p := range r.RemotePoPs() {
		if !p.Partitioned {
			out = append(out, p.PoPID)
		}
	}
	return out
}

// Members returns the own PoP's other live members, sorted (nil without a
// PoP transport).
func (r *Replicator) Members() []string {
	if r.popT == nil {
		return nil
	}
	return r.popT.Members()
}

// Stats returns per-transport counters, pop first, then global, then (with
// region voices on) region; absent transports are left out.
func (r *Replicator) Stats() []TransportStats {
	var out []TransportStats
	for i, t := range []Transport{r.popT, r.globT, r.globT} {
		if t == nil || (i == tRegion && !r.core.RegionVoices()) {
			continue
		}
		c := &r.tstats[i]
		out = append(out, TransportStats{
			Transport:        c.name,
			Scope:            [...]string{"pop", "global", "region"}[i],
			MessagesSent:     c.msgsSent.Load(),
			BytesSent:        c.bytesSent.Load(),
			EntriesSent:      c.entriesSent.Load(),
			MessagesReceived: c.msgsRecv.Load(),
			BytesReceived:    c.bytesRecv.Load(),
			EntriesReceived:  c.entriesRecv.Load(),
			SendErrors:       c.sendErrors.Load(),
			DecodeErrors:     c.decodeErrors.Load(),
			UnknownSections:  c.unknownSections.Load(),
			Dropped:          c.dropped.Load(),
			Rejected:         c.rejected.Load(),
			Forged:           c.forged.Load(),
			StateEntries:     c.stateEntries.Load(),
			LagCount:         c.lagCount.Load(),
			LagSum:           time.Duration(c.lagSumNanos.Load()),
			LagMax:           time.Duration(c.lagMaxNanos.Load()),
		})
	}
	return out
}

// Status returns the state for the status page.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	epoch, pstats, startup := r.core.Epoch(), r.core.Stats(), r.core.Startup()
	drift, _ := r.core.Drift()
	corr := r.core.ClockCorrection()
	voice, repoch := r.core.RegionVoice()
	r.mu.Unlock()
	if drift == nil {
		drift = []repl.PeerDrift{}
	}
	s := Status{
		Self:            r.self.String(),
		Members:         r.Members(),
		RemotePoPs:      r.RemotePoPs(),
		Partitioned:     []string{},
		Transports:      r.Stats(),
		Resyncs:         r.resyncs.Load(),
		Epoch:           epoch,
		RegionVoices:    r.core.RegionVoices(),
		RegionVoice:     voice,
		RegionEpoch:     repoch,
		Startup:         startup,
		Drift:           drift,
		ClockCorrection: corr,
		Protocol:        pstats,
		QueuedBytes:     r.queuedBytes.Load(),
		QueuedBytesPeak: r.queuedPeak.Load(),
		FlushInterval:   r.opts.FlushInterval,
		PeerTimeout:     r.opts.PeerTimeout,
	}
	if s.Members == nil {
		s.Members = []string{}
	}
	for _, p := range s.RemotePoPs {
		if p.Partitioned {
			s.Partitioned = append(s.Partitioned, p.String())
		}
	}
	return s
}
