// Package edgerepl is the replication runtime of an engine.App: memberlist
// inside the PoP when the config has a gossip section, NATS to the other
// PoPs. The edge daemon and the middleware package build their replicators
// with New.
package edgerepl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/server/engine"
)

// gossipReplicator runs gossip.Replicator for the daemon: memberlist inside
// the PoP when the config has a gossip section, NATS to the other PoPs.
type gossipReplicator struct {
	opts gossip.Options
	log  *slog.Logger
	r    atomic.Pointer[gossip.Replicator]
	// ml is the memberlist transport once started, for key rotation.
	ml atomic.Pointer[gossip.Memberlist]
	// voicesChosen says how region voices were chosen (status).
	voicesChosen string
}

// New builds the replicator of the App env describes; it is an
// engine.NewReplicatorFunc.
func New(env engine.ReplicationEnv) (engine.Replicator, error) {
	cfg := env.Config
	self := env.Node.Link().Self()
	id := self.PoPID
	g := &gossipReplicator{log: env.Logger}
	lag := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "geolimit_replication_lag_seconds",
		Help: "Receive time minus the sender's flush time of replicated messages, by transport.",
		// 100us .. ~3.3s
		Buckets: prometheus.ExponentialBuckets(1e-4, 2, 16),
	}, []string{"transport"})
	voices, chosen := cfg.Replication.VoicesChosen(id)
	g.voicesChosen = chosen
	if voices && cfg.Replication.RegionVoices == nil {
		env.Logger.Info("region voices on: chosen by the fleet's shape (replication.expected_pops)", "fleet", chosen)
	}
	var regionLag *prometheus.HistogramVec
	if voices {
		regionLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "geolimit_replication_region_lag_seconds",
			Help:    "Receive time minus the sender's flush time of messages on the region link (replication.region_voices: regions' totals, modes, penalty blocks), by transport.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 16),
		}, []string{"transport"})
	}
	queue, pending := QueueBudget(cfg.Limits.MemoryBudget())
	g.opts = gossip.Options{
		Node:       env.Node.Link(),
		Clock:      env.Clock,
		FleetClock: env.FleetClock,
		Settings:   cfg.Replication,
		Logger:     env.Logger,
		ObserveLag: func(t string, d time.Duration) { lag.WithLabelValues(t).Observe(d.Seconds()) },
		QueueBytes: queue,
	}
	if regionLag != nil {
		g.opts.ObserveRegionLag = func(t string, d time.Duration) { regionLag.WithLabelValues(t).Observe(d.Seconds()) }
	}
	if gc := cfg.Gossip; gc != nil {
		mc := gossip.MemberlistConfig{
			Self:      id,
			Name:      repl.MemberName(self),
			Bind:      gc.Bind,
			Advertise: gc.Advertise,
			Join:      gc.Join,
			Label:     gc.Label,
			Logger:    env.Logger.With("transport", "memberlist"),
		}
		keys, err := gc.Keys()
		if err != nil {
			return nil, err
		}
		mc.SecretKeys = keys
		switch {
		case keys != nil:
			env.Logger.Info("gossip encrypted", "keys", len(keys), "encrypting", keyID(keys[0]))
		case !config.IsLoopback(gc.Bind):
			env.Logger.Warn("gossip listens beyond loopback without a key (gossip.insecure): whoever reaches it can join the PoP and inject counts", "bind", gc.Bind)
		}
		connect := gossip.MemberlistConnect(mc)
		g.opts.PoP = func(h gossip.Handler) (gossip.Transport, error) {
			t, err := connect(h)
			if ml, ok := t.(*gossip.Memberlist); ok {
				g.ml.Store(ml)
			}
			return t, err
		}
	}
	if cfg.NATS.Disabled {
		return g.finish(env, lag, regionLag)
	}
	nc := gossip.NATSConfig{
		Self:            id,
		Name:            self.String(),
		URL:             env.NATSURL,
		SubjectPrefix:   cfg.NATS.SubjectPrefix,
		CredentialsFile: cfg.NATS.Credentials,
		User:            cfg.NATS.User,
		Password:        cfg.NATS.Password,
		RegionVoices:    voices,
		Logger:          env.Logger.With("transport", "nats"),
		PendingBytes:    pending,
	}
	if env.NATS != nil {
		// The node's own embedded server: in process, so the client port's
		// TLS and its listen address do not matter; its credentials do.
		nc.InProcess = env.NATS
	} else if t := cfg.NATS.TLS; t != nil {
		if t.CAFile != "" {
			nc.RootCAs = []string{t.CAFile}
		}
		nc.ClientCert, nc.ClientKey = t.CertFile, t.KeyFile
	}
	g.opts.Global = gossip.NATSConnect(nc)
	return g.finish(env, lag, regionLag)
}

// finish registers the replication metrics (regionLag only with region
// voices on).
func (g *gossipReplicator) finish(env engine.ReplicationEnv, lag, regionLag *prometheus.HistogramVec) (engine.Replicator, error) {
	if env.Registry != nil {
		if err := env.Registry.Register(lag); err != nil {
			return nil, fmt.Errorf("replication metrics: %w", err)
		}
		if regionLag != nil {
			if err := env.Registry.Register(regionLag); err != nil {
				return nil, fmt.Errorf("replication metrics: %w", err)
			}
		}
		if err := env.Registry.Register(&replCollector{g: g}); err != nil {
			return nil, fmt.Errorf("replication metrics: %w", err)
		}
	}
	return g, nil
}

func (g *gossipReplicator) Start(ctx context.Context) error {
	r, err := gossip.Start(ctx, g.opts)
	if err != nil {
		return err
	}
	g.r.Store(r)
	return nil
}

func (g *gossipReplicator) Close() error {
	if r := g.r.Load(); r != nil {
		return r.Close()
	}
	return nil
}

// ReloadConfig applies the keys of cfg's gossip.secret_key_file to the
// running memberlist (see gossip.Memberlist.SetKeys). Turning encryption on
// or off waits for a restart.
func (g *gossipReplicator) ReloadConfig(cfg *config.Config) error {
	ml := g.ml.Load()
	if ml == nil || cfg.Gossip == nil {
		return nil // no memberlist, or the gossip section changed: a restart applies it
	}
	keys, err := cfg.Gossip.Keys()
	if err != nil {
		return err
	}
	running := ml.Keys() != nil
	switch {
	case keys == nil && running:
		return errors.New("gossip.secret_key_file: removed, but gossip stays encrypted until a restart")
	case keys == nil:
		return nil
	case !running:
		return errors.New("gossip.secret_key_file: set, but gossip starts to be encrypted only at a restart")
	}
	changed, err := ml.SetKeys(keys)
	if err != nil {
		return fmt.Errorf("gossip.secret_key_file: %w", err)
	}
	if changed {
		g.log.Info("gossip keys applied", "keys", len(keys), "encrypting", keyID(keys[0]))
	}
	return nil
}

// keyID names a key in logs without revealing it: the first bytes of its
// SHA-256.
func keyID(k []byte) string {
	h := sha256.Sum256(k)
	return hex.EncodeToString(h[:4])
}

func (g *gossipReplicator) Status() engine.ReplicationStatus {
	st := engine.ReplicationStatus{Members: []engine.Member{}, RemotePoPs: []engine.RemotePoP{}, Partitions: []string{}}
	r := g.r.Load()
	if r == nil {
		return st
	}
	s := r.Status()
	for _, m := range s.Members {
		st.Members = append(st.Members, engine.Member{Name: m, State: "alive"})
	}
	for _, p := range s.RemotePoPs {
		rp := engine.RemotePoP{PoPID: p.PoPID, LastHeardMS: -1, Partitioned: p.Partitioned, Expected: p.Expected, Epoch: p.Epoch}
		if p.Age >= 0 {
			rp.LastHeardMS = p.Age.Milliseconds()
		}
		st.RemotePoPs = append(st.RemotePoPs, rp)
	}
	st.Partitions = append(st.Partitions, s.Partitioned...)
	st.Transports = s.Transports
	st.Epoch, st.Protocol, st.Startup, st.Drift = s.Epoch, s.Protocol, s.Startup, s.Drift
	st.RegionVoice, st.RegionEpoch = s.RegionVoice, s.RegionEpoch
	st.RegionVoices, st.RegionVoicesChosen = s.RegionVoices, g.voicesChosen
	return st
}

// replCollector exports the Replicator's counters at scrape time.
type replCollector struct{ g *gossipReplicator }

var (
	labelsTS = []string{"transport", "scope"}

	descMsgsSent     = prometheus.NewDesc("geolimit_replication_messages_sent_total", "Replication messages (deltas, heartbeats) published.", labelsTS, nil)
	descBytesSent    = prometheus.NewDesc("geolimit_replication_sent_bytes_total", "Replication payload bytes published.", labelsTS, nil)
	descEntriesSent  = prometheus.NewDesc("geolimit_replication_sent_entries_total", "Key counts (entries) sent in deltas.", labelsTS, nil)
	descMsgsRecv     = prometheus.NewDesc("geolimit_replication_messages_received_total", "Replication messages received.", labelsTS, nil)
	descBytesRecv    = prometheus.NewDesc("geolimit_replication_received_bytes_total", "Replication payload bytes received.", labelsTS, nil)
	descEntriesRecv  = prometheus.NewDesc("geolimit_replication_received_entries_total", "Entries of well-formed received deltas.", labelsTS, nil)
	descRejected     = prometheus.NewDesc("geolimit_replication_rejected_entries_total", "Received entries refused: sender not of the message's PoP, unknown rule, wrong scope, bad key.", labelsTS, nil)
	descForged       = prometheus.NewDesc("geolimit_replication_forged_messages_total", "Received messages whose sender is not of the PoP they came from.", labelsTS, nil)
	descDecodeErrors = prometheus.NewDesc("geolimit_replication_decode_errors_total", "Received messages that were not a valid delta.", labelsTS, nil)
	descUnknown      = prometheus.NewDesc("geolimit_replication_unknown_sections_total", "Sections of kinds this version does not know (a newer peer's feature), skipped whole.", labelsTS, nil)
	descDropped      = prometheus.NewDesc("geolimit_replication_dropped_messages_total", "Received messages dropped because the apply queue was full.", labelsTS, nil)
	descSendErrors   = prometheus.NewDesc("geolimit_replication_send_errors_total", "Messages that could not be published.", labelsTS, nil)
	descMembers      = prometheus.NewDesc("geolimit_replication_members", "Other live members of this PoP.", nil, nil)
	descRemotePoPs   = prometheus.NewDesc("geolimit_replication_remote_pops", "Remote PoPs known (heard or expected).", nil, nil)
	descPartitioned  = prometheus.NewDesc("geolimit_replication_partitioned_pops", "Remote PoPs silent for longer than replication.peer_timeout.", nil, nil)
	descLastHeard    = prometheus.NewDesc("geolimit_replication_last_heard_seconds", "Time since the last message from a remote PoP: the expected PoPs and those whose counts were merged first, then the others, 128 at most (geolimit_replication_remote_pops counts them all).", []string{"region", "pop"}, nil)
	descResyncs      = prometheus.NewDesc("geolimit_replication_resyncs_total", "Anti-entropy rounds triggered by a join, a reconnect or a PoP heard again.", nil, nil)
	descMismatch     = prometheus.NewDesc("geolimit_rule_mismatch", "1 for a global rule that a remote PoP (peer, region/pop) has otherwise (window, limit, scope, on_partition) or this node lacks.", []string{"rule", "peer"}, nil)
	descClockOffset  = prometheus.NewDesc("geolimit_peer_clock_offset_seconds", "A remote PoP's clock minus this node's, estimated from its heartbeats (low by up to one one-way latency); for the PoPs of geolimit_replication_last_heard_seconds.", []string{"peer"}, nil)
	descSynced       = prometheus.NewDesc("geolimit_startup_synced", "1 once the node holds its former incarnations' counts or stopped waiting for them (replication.startup_sync), else 0.", nil, nil)
)

func (c *replCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMsgsSent, descBytesSent, descEntriesSent, descMsgsRecv, descBytesRecv, descEntriesRecv,
		descRejected, descForged, descDecodeErrors, descUnknown, descDropped, descSendErrors, descMembers, descRemotePoPs, descPartitioned, descLastHeard, descResyncs,
		descMismatch, descClockOffset, descSynced} {
		ch <- d
	}
}

func (c *replCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.g.r.Load()
	if r == nil {
		return
	}
	s := r.Status()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, t := range s.Transports {
		l := []string{t.Transport, t.Scope}
		counter(descMsgsSent, t.MessagesSent, l...)
		counter(descBytesSent, t.BytesSent, l...)
		counter(descEntriesSent, t.EntriesSent, l...)
		counter(descMsgsRecv, t.MessagesReceived, l...)
		counter(descBytesRecv, t.BytesReceived, l...)
		counter(descEntriesRecv, t.EntriesReceived, l...)
		counter(descRejected, t.Rejected, l...)
		counter(descForged, t.Forged, l...)
		counter(descDecodeErrors, t.DecodeErrors, l...)
		counter(descUnknown, t.UnknownSections, l...)
		counter(descDropped, t.Dropped, l...)
		counter(descSendErrors, t.SendErrors, l...)
	}
	counter(descResyncs, s.Resyncs)
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(len(s.Members)))
	ch <- prometheus.MustNewConstMetric(descRemotePoPs, prometheus.GaugeValue, float64(len(s.RemotePoPs)))
	ch <- prometheus.MustNewConstMetric(descPartitioned, prometheus.GaugeValue, float64(len(s.Partitioned)))
	listed := listedPoPs(s.RemotePoPs)
	for _, p := range s.RemotePoPs {
		if p.Age >= 0 && listed[p.PoPID] {
			ch <- prometheus.MustNewConstMetric(descLastHeard, prometheus.GaugeValue, p.Age.Seconds(), p.Region, p.PoP)
		}
	}
	mismatches := 0
	for _, d := range s.Drift {
		if !listed[d.PoPID] {
			continue
		}
		peer := d.String()
		ch <- prometheus.MustNewConstMetric(descClockOffset, prometheus.GaugeValue, d.ClockOffset.Seconds(), peer)
		for _, m := range d.Mismatches {
			if mismatches++; mismatches <= maxMismatchSeries {
				ch <- prometheus.MustNewConstMetric(descMismatch, prometheus.GaugeValue, 1, m.Rule, peer)
			}
		}
	}
	synced := 0.0
	if s.Startup.Synced {
		synced = 1
	}
	ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, synced)
}

// Bounds on the series labelled by remote PoP, whatever the PoPs heard:
// a PoP's messages on an open link can name any PoP.
const (
	// maxPoPSeries bounds the remote PoPs with their own last-heard and
	// clock offset series (status lists every one).
	maxPoPSeries = 128
	// maxMismatchSeries bounds the geolimit_rule_mismatch series.
	maxMismatchSeries = 256
)

// listedPoPs returns the remote PoPs that get their own series: the
// expected ones and those whose counts were merged first, then the others,
// each by name, maxPoPSeries at most.
func listedPoPs(ps []gossip.RemotePoP) map[identity.PoPID]bool {
	out := make(map[identity.PoPID]bool, min(len(ps), maxPoPSeries))
	for _, standing := range [2]bool{true, false} {
		for _, p := range ps {
			if len(out) == maxPoPSeries {
				return out
			}
			if (p.Expected || p.Counted) == standing {
				out[p.PoPID] = true
			}
		}
	}
	return out
}

var (
	_ engine.Replicator     = (*gossipReplicator)(nil)
	_ engine.ConfigReloader = (*gossipReplicator)(nil)
)

// QueueBudget is the share of the memory budget (limits.max_memory) that
// received replication messages may hold before they are applied: the
// receive queue (queue bytes, budget / 8, at most 32 MiB) and the NATS
// client's buffer of each subscription (pending bytes, budget / 64, at
// most 8 MiB; a node has at most five). With the store's half, they leave
// at least a quarter of the budget to the heap's garbage and the rest of
// the process. What does not fit is dropped and counted; anti-entropy
// repairs it.
func QueueBudget(budget int64) (queue int64, pending int) {
	queue = min(max(budget/8, 1<<20), 32<<20)
	pending = int(min(max(budget/64, 256<<10), 8<<20))
	return queue, pending
}
