package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/hashicorp/memberlist"
)

// MemberlistConfig configures the memberlist transport that links the nodes
// of one PoP.
type MemberlistConfig struct {
	// Self is the own PoP; the default label is derived from it.
	Self identity.PoPID
	// Name is this node's unique member name within the PoP. Use a name that
	// is new at every start (e.g. node#incarnation) so that a restarted node
	// never conflicts with its former self.
	Name string
	// Bind is the host:port for gossip (UDP and TCP). Port 0 picks a free port.
	Bind string
	// Advertise is the host:port peers use to reach this node; empty = Bind.
	Advertise string
	// Join lists host:port of existing members to join at start. Unreachable
	// ones are skipped; none reachable is not an error (the first node).
	// While the node has no other member, it tries again every RejoinInterval.
	Join []string
	// RejoinInterval is how often a node alone in its PoP retries Join; 0
	// means 2s.
	RejoinInterval time.Duration
	// Label is put on every packet and stream; members with another label
	// ignore them. Empty means "geolimit/<region>/<pop>".
	Label string
	// SecretKeys, if set, encrypt and authenticate gossip (AES-GCM; keys of
	// 16, 24 or 32 bytes): the first encrypts what this node sends, every
	// one is accepted on what it receives. Packets and streams that none
	// of them decrypts, unencrypted ones included, are dropped. Rotate with
	// SetKeys.
	SecretKeys [][]byte
	// SecretKey is a shorthand for SecretKeys with one key.
	SecretKey []byte
	// UDPBufferSize is the largest UDP packet in bytes; deltas sent best
	// effort are split below it. 0 means 1400 (a safe Ethernet MTU).
	UDPBufferSize int
	// ReliableMaxPayload is the largest message sent over TCP (anti-entropy)
	// in bytes. 0 means 256 KiB.
	ReliableMaxPayload int
	// ProbeInterval is memberlist's failure-detection probe interval; 0 means
	// memberlist's LAN default (1s).
	ProbeInterval time.Duration
	// PushPullInterval is the full state sync interval; 0 means 30s.
	PushPullInterval time.Duration
	// Logger receives memberlist's logs at debug level; nil discards them.
	Logger *slog.Logger
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// ErrKeysAtRestart is SetKeys' answer on a transport started without keys:
// encryption is turned on (or off) only at start.
var ErrKeysAtRestart = errors.New("gossip: memberlist: started without keys: encryption is turned on or off only at start")

// checkKeys checks a key set: at least one key, each of 16, 24 or 32 bytes,
// none twice.
func checkKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("gossip: memberlist: no secret key")
	}
	for i, k := range keys {
		if !validKeyLen(len(k)) {
			return fmt.Errorf("gossip: memberlist: secret key %d of %d bytes (want 16, 24 or 32)", i, len(k))
		}
		for j := range i {
			if bytes.Equal(keys[j], k) {
				return fmt.Errorf("gossip: memberlist: secret key %d repeats key %d", i, j)
			}
		}
	}
	return nil
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = slices.Clone(k)
	}
	return out
}

func hasKey(keys [][]byte, k []byte) bool {
	return slices.ContainsFunc(keys, func(x []byte) bool { return bytes.Equal(x, k) })
}

// Keys returns copies of the keys in use, the one that encrypts first; nil
// without encryption.
func (t *Memberlist) Keys() [][]byte {
	if t.keyring == nil {
		return nil
	}
	t.keyMu.Lock()
	defer t.keyMu.Unlock()
	return cloneKeys(t.keyring.GetKeys())
}

// SetKeys replaces the keys of a running transport: keys[0] encrypts from
// now on, every key of keys is accepted, keys not in keys are no longer
// accepted (Keys may list the accepted ones in another order). It reports whether anything changed. A transport started
// without keys answers ErrKeysAtRestart.
//
// To rotate a PoP's key without losing a packet, take each step on every
// member before the next: add the new key after the current one; move it
// first; drop the old one.
func (t *Memberlist) SetKeys(keys [][]byte) (bool, error) {
	if err := checkKeys(keys); err != nil {
		return false, err
	}
	if t.keyring == nil {
		return false, ErrKeysAtRestart
	}
	t.keyMu.Lock()
	defer t.keyMu.Unlock()
	kr := t.keyring
	keys = cloneKeys(keys)
	changed := false
	for _, k := range keys {
		if !hasKey(kr.GetKeys(), k) {
			if err := kr.AddKey(k); err != nil {
				return changed, fmt.Errorf("gossip: memberlist: %w", err)
			}
			changed = true
		}
	}
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return changed, fmt.Errorf("gossip: memberlist: %w", err)
		}
		changed = true
	}
	// Drop the keys no longer listed, always the ring's last one: memberlist
	// decrypts with the ring's current slice without a lock, and
	// Keyring.RemoveKey shifts the keys behind the one it removes within
	// that slice, but removing the last one shifts nothing. The rotation
	// steps above always drop the last key; for other changes the kept
	// keys are first moved ahead (each UseKey makes one key the encrypting
	// one for a moment, ending with keys[0]).
	for {
		ring := kr.GetKeys()
		if !slices.ContainsFunc(ring, func(k []byte) bool { return !hasKey(keys, k) }) {
			break
		}
		if last := ring[len(ring)-1]; !hasKey(keys, last) {
			if err := kr.RemoveKey(last); err != nil {
				return changed, fmt.Errorf("gossip: memberlist: %w", err)
			}
			changed = true
			continue
		}
		for i := len(keys) - 1; i >= 0; i-- {
			if err := kr.UseKey(keys[i]); err != nil {
				return changed, fmt.Errorf("gossip: memberlist: %w", err)
			}
		}
	}
	return changed, nil
}

// memberlistMargin is what a best-effort packet needs beyond the message:
// message type, compound header, CRC, encryption (45 bytes worst case).
const memberlistMargin = 64

// Memberlist is a Transport over hashicorp/memberlist inside one PoP. Deltas
// go to each member directly (UDP best effort, TCP for reliable batches);
// push/pull carries the Handler's LocalState on join and periodically.
// It is safe for concurrent use.
type Memberlist struct {
	cfg  MemberlistConfig
	h    Handler
	ml   *memberlist.Memberlist
	self string

	// Reliable sends dial TCP and may wait for a member that died and is
	// not yet detected: they go through a bounded queue to one sender
	// goroutine so that Publish never blocks.
	reliable chan reliableSend
	done     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	closed bool

	// keyring is memberlist's, nil without encryption; keyMu serializes
	// SetKeys.
	keyring *memberlist.Keyring
	keyMu   sync.Mutex
}

type reliableSend struct {
	to  *memberlist.Node
	msg []byte
}

// reliableQueue bounds the reliable sends waiting for the sender goroutine.
const reliableQueue = 256

// NewMemberlist starts a memberlist transport delivering to h and joins cfg.Join.
func NewMemberlist(cfg MemberlistConfig, h Handler) (*Memberlist, error) {
	if err := cfg.Self.Validate(); err != nil {
		return nil, fmt.Errorf("gossip: memberlist: self: %w", err)
	}
	if cfg.Name == "" {
		return nil, errors.New("gossip: memberlist: name must not be empty")
	}
	keys := cfg.SecretKeys
	if cfg.SecretKey != nil {
		keys = append([][]byte{cfg.SecretKey}, keys...)
	}
	if len(keys) > 0 {
		if err := checkKeys(keys); err != nil {
			return nil, err
		}
	}
	if cfg.UDPBufferSize == 0 {
		cfg.UDPBufferSize = 1400
	}
	if cfg.UDPBufferSize < 576 {
		return nil, fmt.Errorf("gossip: memberlist: udp buffer size %d too small (min 576)", cfg.UDPBufferSize)
	}
	if cfg.ReliableMaxPayload == 0 {
		cfg.ReliableMaxPayload = 256 << 10
	}
	if cfg.RejoinInterval <= 0 {
		cfg.RejoinInterval = 2 * time.Second
	}
	if cfg.Label == "" {
		cfg.Label = "geolimit/" + cfg.Self.String()
	}
	host, port, err := splitHostPort(cfg.Bind, "bind")
	if err != nil {
		return nil, err
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = "", 0
	if cfg.Advertise != "" {
		if mc.AdvertiseAddr, mc.AdvertisePort, err = splitHostPort(cfg.Advertise, "advertise"); err != nil {
			return nil, err
		}
	}
	mc.Label = cfg.Label
	var keyring *memberlist.Keyring
	if len(keys) > 0 {
		// memberlist keeps the keyring's slices: give it copies.
		if keyring, err = memberlist.NewKeyring(cloneKeys(keys[1:]), slices.Clone(keys[0])); err != nil {
			return nil, fmt.Errorf("gossip: memberlist: %w", err)
		}
		mc.Keyring = keyring
		// Strict both ways: nothing unencrypted goes out or comes in.
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.UDPBufferSize = cfg.UDPBufferSize
	mc.EnableCompression = false // deltas are compact already; keeps sizes predictable
	// Bounds a reliable send (and push/pull) to a member that died and is
	// not yet detected; LAN default is 10s.
	mc.TCPTimeout = 2 * time.Second
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
	}
	if cfg.PushPullInterval > 0 {
		mc.PushPullInterval = cfg.PushPullInterval
	}
	if cfg.Logger != nil {
		mc.Logger = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)
	} else {
		mc.Logger = log.New(io.Discard, "", 0)
	}
	t := &Memberlist{cfg: cfg, h: h, self: cfg.Name, reliable: make(chan reliableSend, reliableQueue), done: make(chan struct{}), keyring: keyring}
	d := &mlDelegate{t: t}
	mc.Delegate = d
	mc.Events = d
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("gossip: memberlist: %w", err)
	}
	t.ml = ml
	t.wg.Add(1)
	go t.sendReliable()
	if len(cfg.Join) > 0 {
		if _, err := ml.Join(cfg.Join); err != nil && cfg.Logger != nil {
			// Not fatal (the first node of a PoP has nobody to join, and
			// others will join it; rejoin retries), but a node that stays
			// alone counts alone: an operator must see it.
			cfg.Logger.Warn("gossip: memberlist join failed: no member of gossip.join answered; retrying while alone",
				"join", cfg.Join, "retry_every", cfg.RejoinInterval, "err", err)
		}
		t.wg.Add(1)
		go t.rejoin()
	}
	return t, nil
}

// rejoin retries Join while this node has no other member: peers that were
// down at start, or a restarted node that nobody joins again.
func (t *Memberlist) rejoin() {
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.RejoinInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
			if t.ml.NumMembers() > 1 {
				continue
			}
			if n, err := t.ml.Join(t.cfg.Join); err != nil && t.cfg.Logger != nil {
				t.cfg.Logger.Debug("gossip: memberlist rejoin", "joined", n, "err", err)
			}
		}
	}
}

func splitHostPort(hp, what string) (string, int, error) {
	if hp == "" {
		return "127.0.0.1", 0, nil
	}
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("gossip: memberlist %s %q: %w", what, hp, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("gossip: memberlist %s %q: bad port", what, hp)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// Addr returns the host:port this node gossips on (with the port picked if
// Bind's port was 0).
func (t *Memberlist) Addr() string {
	n := t.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Name returns "memberlist".
func (t *Memberlist) Name() string { return "memberlist" }

// MaxPayload returns the largest message: under the UDP buffer size for best
// effort, ReliableMaxPayload for reliable sends.
func (t *Memberlist) MaxPayload(reliable bool) int {
	if reliable {
		return t.cfg.ReliableMaxPayload
	}
	return t.cfg.UDPBufferSize - memberlistMargin - len(t.cfg.Label) - 3
}

// Publish sends msg to every other member directly: over UDP, or when
// reliable over TCP from a bounded queue (errors then are logged, not
// returned). kind must be KindDelta. It does not block.
func (t *Memberlist) Publish(kind Kind, msg []byte, reliable bool) error {
	if kind != KindDelta {
		return fmt.Errorf("gossip: memberlist: cannot publish %s", kind)
	}
	if len(msg) > t.MaxPayload(reliable) {
		return ErrTooLarge
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return ErrClosed
	}
	var errs []error
	for _, n := range t.ml.Members() {
		if n.Name == t.self {
			continue
		}
		var err error
		if reliable {
			select {
			case t.reliable <- reliableSend{to: n, msg: slices.Clone(msg)}:
			default:
				err = errors.New("reliable send queue full")
			}
		} else {
			err = t.ml.SendBestEffort(n, msg)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("gossip: memberlist send to %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Members returns the other live members' names, sorted.
func (t *Memberlist) Members() []string {
	out := []string{}
	for _, n := range t.ml.Members() {
		if n.Name != t.self {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Close leaves the PoP (telling the others, waiting up to a second) and
// shuts memberlist down. It is idempotent.
func (t *Memberlist) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	close(t.done) // no more rejoins or queued reliable sends
	t.wg.Wait()
	// A leave that is not acknowledged in time (the others are stopping
	// too) is not an error: they will find this node dead instead.
	if err := t.ml.Leave(time.Second); err != nil && t.cfg.Logger != nil {
		t.cfg.Logger.Debug("gossip: memberlist leave", "err", err)
	}
	if err := t.ml.Shutdown(); err != nil {
		return fmt.Errorf("gossip: memberlist shutdown: %w", err)
	}
	return nil
}

func (t *Memberlist) sendReliable() {
	defer t.wg.Done()
	for {
		select {
		case <-t.done:
			return
		case s := <-t.reliable:
			if err := t.ml.SendReliable(s.to, s.msg); err != nil && t.cfg.Logger != nil {
				t.cfg.Logger.Debug("gossip: memberlist reliable send", "to", s.to.Name, "err", err)
			}
		}
	}
}

// mlDelegate adapts memberlist's callbacks to the Handler.
type mlDelegate struct{ t *Memberlist }

func (d *mlDelegate) NodeMeta(int) []byte { return nil }

// NotifyMsg hands the message to the Handler, whose Receive must not block.
func (d *mlDelegate) NotifyMsg(b []byte) { d.t.h.Receive(d.t.cfg.Self, KindDelta, b) }

func (d *mlDelegate) GetBroadcasts(int, int) [][]byte { return nil }

func (d *mlDelegate) LocalState(bool) []byte { return d.t.h.LocalState() }

func (d *mlDelegate) MergeRemoteState(b []byte, _ bool) { d.t.h.MergeState(b) }

func (d *mlDelegate) NotifyJoin(n *memberlist.Node) {
	if n.Name != d.t.self {
		d.t.h.Resync()
	}
}

func (d *mlDelegate) NotifyLeave(*memberlist.Node)  {}
func (d *mlDelegate) NotifyUpdate(*memberlist.Node) {}

var _ Transport = (*Memberlist)(nil)

// MemberlistConnect returns a Connect that starts a memberlist transport.
func MemberlistConnect(cfg MemberlistConfig) Connect {
	return func(h Handler) (Transport, error) {
		t, err := NewMemberlist(cfg, h)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
}

// LocalName returns the name this node goes by in the other members'
// Members.
func (t *Memberlist) LocalName() string { return t.self }
