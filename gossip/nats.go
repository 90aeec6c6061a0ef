package gossip

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/nats-io/nats.go"
)

// NATSConfig configures the NATS transport that links PoPs and regions.
type NATSConfig struct {
	// Self is the own PoP: deltas are published on
	// <SubjectPrefix>.delta.<region>.<pop> and messages from it are skipped
	// (the own PoP's members are reached over memberlist).
	Self identity.PoPID
	// Name is the connection name shown by the server (e.g. the node id).
	Name string
	// URL is one or more comma-separated server URLs.
	URL string
	// InProcess, when set, is a server in this process to connect to
	// without a socket (e.g. an embedded nats-server); URL then only names
	// it. Credentials apply; TLS does not (nothing leaves the process).
	InProcess nats.InProcessConnProvider
	// SubjectPrefix is the first subject token(s); empty means "geolimit".
	SubjectPrefix string
	// MaxPayload caps one message in bytes, below the server's max_payload;
	// 0 means 64 KiB.
	MaxPayload int
	// ReconnectBufSize bounds what is buffered while disconnected, in bytes;
	// 0 means 1 MiB, -1 buffers nothing. What does not fit is dropped (the
	// anti-entropy round after the reconnect repairs it).
	ReconnectBufSize int
	// ReconnectWait is the pause between reconnect attempts; 0 means 250ms.
	ReconnectWait time.Duration
	// PingInterval is how often the client pings the server; 0 means 2s. A
	// dead link is noticed after PingInterval x MaxPingsOutstanding.
	PingInterval time.Duration
	// MaxPingsOutstanding is how many unanswered pings mean the link is dead;
	// 0 means 2.
	MaxPingsOutstanding int
	// CredentialsFile is a NATS credentials file (JWT and nkey seed).
	CredentialsFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// TLS, if set, is used for the connection (CA, client certificate).
	TLS *tls.Config
	// RootCAs and ClientCert/ClientKey are PEM files, an alternative to TLS.
	RootCAs               []string
	ClientCert, ClientKey string
	// RegionVoices matches repl.Settings.RegionVoices: region totals are
	// published on <SubjectPrefix>.region.<region>.<pop> (KindRegion) and
	// heard from every region (with the region's heartbeat turns), and PoP
	// totals and heartbeats (KindDelta, KindHeartbeat) are heard only from
	// the own region's PoPs, sync requests (KindSync) from the own
	// region's PoPs only unless the node's PoP speaks for its region
	// (SpeakForRegion). Every node of the fleet must agree.
	RegionVoices bool
	// PendingLimit bounds the messages waiting to be handed to the Handler
	// per subscription; 0 means 65536.
	PendingLimit int
	// PendingBytes bounds their bytes per subscription; 0 means 8 MiB. The
	// Handler copies a message onto its own bounded queue and returns, so
	// this fills only when the process is starved of CPU.
	PendingBytes int
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
}

// DefaultSubjectPrefix is the subject prefix when none is configured.
const DefaultSubjectPrefix = "geolimit"

// DeltaSubject returns the subject a PoP publishes its deltas on.
func DeltaSubject(prefix string, p identity.PoPID) string { return subject(prefix, "delta", p) }

// HeartbeatSubject returns the subject a PoP publishes its heartbeats on.
func HeartbeatSubject(prefix string, p identity.PoPID) string { return subject(prefix, "hb", p) }

// SyncSubject returns the subject a PoP's nodes ask others to resync on.
func SyncSubject(prefix string, p identity.PoPID) string { return subject(prefix, "sync", p) }

// StateSubject returns the subject on which PoP from relays PoP to's own
// former counts back to it: <prefix>.state.<from>.<to>. It starts with the
// sender's own tokens like every subject a PoP publishes on, so a PoP's NATS
// credentials can be limited to publishing on <prefix>.*.<region>.<pop> and
// <prefix>.state.<region>.<pop>.> (see examples/secure-multi-region).
func StateSubject(prefix string, from, to identity.PoPID) string {
	return subject(prefix, "state", from) + "." + to.Region + "." + to.PoP
}

// subject is <prefix>.<kind>.<region>.<pop>, with the default prefix when
// prefix is empty.
func subject(prefix, kind string, p identity.PoPID) string {
	if prefix == "" {
		prefix = DefaultSubjectPrefix
	}
	return prefix + "." + kind + "." + p.Region + "." + p.PoP
}

// ParseSubject returns the kind and sending PoP of a subject made under
// prefix by DeltaSubject, HeartbeatSubject, SyncSubject, RegionSubject
// (KindRegion) or StateSubject, and for StateSubject the PoP it is for (zero
// otherwise).
func ParseSubject(prefix, subject string) (kind Kind, from, to identity.PoPID, ok bool) {
	if prefix == "" {
		prefix = DefaultSubjectPrefix
	}
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return 0, identity.PoPID{}, identity.PoPID{}, false
	}
	parts := strings.Split(rest, ".")
	n := 3
	if parts[0] == "state" {
		n = 5
	}
	if len(parts) != n {
		return 0, identity.PoPID{}, identity.PoPID{}, false
	}
	from = identity.PoPID{Region: parts[1], PoP: parts[2]}
	if from.Validate() != nil {
		return 0, identity.PoPID{}, identity.PoPID{}, false
	}
	switch parts[0] {
	case "delta":
		return KindDelta, from, identity.PoPID{}, true
	case "hb":
		return KindHeartbeat, from, identity.PoPID{}, true
	case "sync":
		return KindSync, from, identity.PoPID{}, true
	case "region":
		return KindRegion, from, identity.PoPID{}, true
	case "state":
		to = identity.PoPID{Region: parts[3], PoP: parts[4]}
		if to.Validate() != nil {
			return 0, identity.PoPID{}, identity.PoPID{}, false
		}
		return KindState, from, to, true
	}
	return 0, identity.PoPID{}, identity.PoPID{}, false
}

// NATS is a Transport over core NATS pub/sub between PoPs. Each PoP
// publishes on its own subjects; every node subscribes to all PoPs' subjects
// (with NATSConfig.RegionVoices, to the PoP totals, heartbeats and sync
// requests of its own region's PoPs only, and to every region's sync
// requests while its PoP speaks for its region) and skips its own PoP. The connection reconnects forever with a bounded
// buffer; every (re)connect asks the Handler to resync, which then also asks
// the other PoPs to resync (a KindSync message), since they may have
// reconnected earlier and sent their counts while this node was away.
// It is safe for concurrent use.
type NATS struct {
	cfg  NATSConfig
	h    Handler
	nc   *nats.Conn
	subs []*nats.Subscription
	// syncSub is the subscription to sync requests (with region voices:
	// the own region's, or every region's while the PoP speaks for its
	// region, speaks); guarded by mu.
	syncSub *nats.Subscription
	speaks  bool
	subj    [3]string // by Kind, except KindState
	region  string    // KindRegion's subject
	mu      sync.Mutex
	closed  bool
}

// NewNATS connects to cfg.URL and subscribes. If no server is reachable yet
// it keeps trying in the background (the node decides locally meanwhile).
func NewNATS(cfg NATSConfig, h Handler) (*NATS, error) {
	if err := cfg.Self.Validate(); err != nil {
		return nil, fmt.Errorf("gossip: nats: self: %w", err)
	}
	if cfg.SubjectPrefix == "" {
		cfg.SubjectPrefix = DefaultSubjectPrefix
	}
	if strings.ContainsAny(cfg.SubjectPrefix, "*> \t\r\n") || strings.HasPrefix(cfg.SubjectPrefix, ".") || strings.HasSuffix(cfg.SubjectPrefix, ".") {
		return nil, fmt.Errorf("gossip: nats: bad subject prefix %q", cfg.SubjectPrefix)
	}
	if cfg.URL == "" {
		cfg.URL = nats.DefaultURL
	}
	if cfg.InProcess != nil {
		// A tls:// URL would make the client start TLS on the in-process
		// connection, which needs none.
		if rest, ok := strings.CutPrefix(cfg.URL, "tls://"); ok {
			cfg.URL = "nats://" + rest
		}
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 64 << 10
	}
	if cfg.ReconnectBufSize == 0 {
		cfg.ReconnectBufSize = 1 << 20
	}
	if cfg.ReconnectBufSize < -1 {
		cfg.ReconnectBufSize = -1
	}
	if cfg.ReconnectWait <= 0 {
		cfg.ReconnectWait = 250 * time.Millisecond
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 2 * time.Second
	}
	if cfg.MaxPingsOutstanding <= 0 {
		cfg.MaxPingsOutstanding = 2
	}
	if cfg.PendingLimit <= 0 {
		cfg.PendingLimit = 1 << 16
	}
	if cfg.PendingBytes <= 0 {
		cfg.PendingBytes = 8 << 20
	}
	t := &NATS{cfg: cfg, h: h, subj: [3]string{
		KindDelta:     DeltaSubject(cfg.SubjectPrefix, cfg.Self),
		KindHeartbeat: HeartbeatSubject(cfg.SubjectPrefix, cfg.Self),
		KindSync:      SyncSubject(cfg.SubjectPrefix, cfg.Self),
	}, region: RegionSubject(cfg.SubjectPrefix, cfg.Self)}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(cfg.ReconnectWait),
		nats.ReconnectBufSize(cfg.ReconnectBufSize),
		nats.PingInterval(cfg.PingInterval),
		nats.MaxPingsOutstanding(cfg.MaxPingsOutstanding),
		// A write that cannot finish within a ping interval means a dead
		// link: reconnect rather than block the flush loop.
		nats.FlusherTimeout(cfg.PingInterval),
		nats.RetryOnFailedConnect(true),
		nats.Timeout(2 * time.Second),
		nats.ConnectHandler(func(c *nats.Conn) {
			log.Info("gossip: nats connected", "url", c.ConnectedUrl())
			h.Resync()
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("gossip: nats reconnected", "url", c.ConnectedUrl())
			h.Resync()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				log.Warn("gossip: nats disconnected", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("gossip: nats", "err", err)
		}),
	}
	if cfg.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredentialsFile))
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.InProcess != nil {
		opts = append(opts, nats.InProcessServer(cfg.InProcess))
	} else {
		if cfg.TLS != nil {
			opts = append(opts, nats.Secure(cfg.TLS))
		}
		if len(cfg.RootCAs) > 0 {
			opts = append(opts, nats.RootCAs(cfg.RootCAs...))
		}
		if cfg.ClientCert != "" {
			opts = append(opts, nats.ClientCert(cfg.ClientCert, cfg.ClientKey))
		}
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("gossip: nats: connect %s: %w", cfg.URL, err)
	}
	t.nc = nc
	for _, subj := range t.subscriptions() {
		sub, err := t.subscribe(subj)
		if err != nil {
			nc.Close()
			return nil, err
		}
		t.subs = append(t.subs, sub)
	}
	sub, err := t.subscribe(t.syncSubject(false))
	if err != nil {
		nc.Close()
		return nil, err
	}
	t.syncSub = sub
	// A round trip to the server, when connected: once it answers, it
	// holds every subscription above, so a message another connection
	// publishes after this returns reaches the node (without it, a peer's
	// message could race the subscriptions and wait for anti-entropy).
	// Not connected yet, the client sends them on connecting and the
	// connect handler resyncs.
	if nc.IsConnected() {
		if err := nc.FlushTimeout(cfg.PingInterval); err != nil {
			log.Warn("gossip: nats: subscriptions not confirmed", "err", err)
		}
	}
	return t, nil
}

// subscribe subscribes to subj with the configured pending limits.
func (t *NATS) subscribe(subj string) (*nats.Subscription, error) {
	sub, err := t.nc.Subscribe(subj, t.receive)
	if err != nil {
		return nil, fmt.Errorf("gossip: nats: subscribe %s: %w", subj, err)
	}
	if err := sub.SetPendingLimits(t.cfg.PendingLimit, t.cfg.PendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("gossip: nats: pending limits: %w", err)
	}
	return sub, nil
}

// subscriptions returns the subjects a node listens on, but for sync
// requests (syncSubject).
func (t *NATS) subscriptions() []string {
	p := t.cfg.SubjectPrefix
	subs := []string{p + ".delta.>", p + ".hb.>", p + ".state.*.*." + t.cfg.Self.Region + "." + t.cfg.Self.PoP}
	if t.cfg.RegionVoices {
		// Other regions' PoP totals reach this node summed, as their
		// region's, and their heartbeats as their region's heartbeat
		// turns (on the region subjects): the gateways then carry none
		// of them.
		subs[0] = p + ".delta." + t.cfg.Self.Region + ".*"
		subs[1] = p + ".hb." + t.cfg.Self.Region + ".*"
		subs = append(subs, p+".region.*.*")
	}
	return subs
}

// syncSubject returns the subject of the sync requests a node hears: every
// PoP's, or with region voices its own region's PoPs' unless speaks (its
// PoP speaks for its region, and answers for it).
func (t *NATS) syncSubject(speaks bool) string {
	p := t.cfg.SubjectPrefix
	if t.cfg.RegionVoices && !speaks {
		return p + ".sync." + t.cfg.Self.Region + ".*"
	}
	return p + ".sync.>"
}

// SpeakForRegion subscribes to every region's sync requests while the
// node's PoP speaks for its region (on), to its own region's otherwise. The
// new subscription is made before the old one ends, so no request falls
// between them (one may arrive twice, which costs a paced re-send at most).
// Without region voices it does nothing.
func (t *NATS) SpeakForRegion(on bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.cfg.RegionVoices || t.closed || on == t.speaks {
		return nil
	}
	sub, err := t.subscribe(t.syncSubject(on))
	if err != nil {
		return err
	}
	old := t.syncSub
	t.syncSub, t.speaks = sub, on
	if old != nil {
		if err := old.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("gossip: nats: unsubscribe: %w", err)
		}
	}
	return nil
}

func (t *NATS) receive(m *nats.Msg) {
	kind, from, to, ok := ParseSubject(t.cfg.SubjectPrefix, m.Subject)
	// Skip the own PoP's messages (its members are reached over memberlist)
	// and state relayed to other PoPs.
	if !ok || from == t.cfg.Self || (kind == KindState && to != t.cfg.Self) {
		return
	}
	t.h.Receive(from, kind, m.Data)
}

// Name returns "nats".
func (t *NATS) Name() string { return "nats" }

// MaxPayload returns the configured cap, lowered to the server's max_payload
// once connected.
func (t *NATS) MaxPayload(bool) int {
	n := t.cfg.MaxPayload
	if mp := t.nc.MaxPayload(); mp > 0 && int(mp) < n {
		n = int(mp)
	}
	return n
}

// Publish publishes msg on the own PoP's delta, heartbeat, sync or (for
// KindRegion) region subject.
func (t *NATS) Publish(kind Kind, msg []byte, _ bool) error {
	if len(msg) > t.MaxPayload(false) {
		return ErrTooLarge
	}
	var subj string
	switch {
	case kind == KindRegion:
		subj = t.region
	case int(kind) < len(t.subj):
		subj = t.subj[kind]
	default:
		return fmt.Errorf("gossip: nats: cannot publish kind %s", kindName(kind))
	}
	if err := t.nc.Publish(subj, msg); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return ErrClosed
		}
		return fmt.Errorf("gossip: nats publish: %w", err)
	}
	return nil
}

// Relay publishes msg for PoP to on the own PoP's state subject for it.
func (t *NATS) Relay(to identity.PoPID, msg []byte) error {
	if len(msg) > t.MaxPayload(false) {
		return ErrTooLarge
	}
	if err := t.nc.Publish(StateSubject(t.cfg.SubjectPrefix, t.cfg.Self, to), msg); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return ErrClosed
		}
		return fmt.Errorf("gossip: nats relay: %w", err)
	}
	return nil
}

// Members returns nil: NATS has no membership; heartbeats tell which PoPs are heard.
func (t *NATS) Members() []string { return nil }

// Connected reports whether the connection to the server is up.
func (t *NATS) Connected() bool { return t.nc.IsConnected() }

// RTT measures the round trip to the server.
func (t *NATS) RTT() (time.Duration, error) { return t.nc.RTT() }

// Close unsubscribes and closes the connection. It is idempotent.
func (t *NATS) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	t.nc.Close()
	return nil
}

var (
	_ Transport     = (*NATS)(nil)
	_ Relayer       = (*NATS)(nil)
	_ RegionSpeaker = (*NATS)(nil)
)

// NATSConnect returns a Connect that starts a NATS transport.
func NATSConnect(cfg NATSConfig) Connect {
	return func(h Handler) (Transport, error) {
		t, err := NewNATS(cfg, h)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
}
