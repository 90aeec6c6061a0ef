package gossip

import (
	"errors"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// Kind says what a message carries (see package repl).
type Kind = repl.Kind

// Message kinds.
const (
	KindDelta     = repl.KindDelta
	KindHeartbeat = repl.KindHeartbeat
	KindSync      = repl.KindSync
	KindState     = repl.KindState
)

// Errors.
var (
	ErrClosed      = errors.New("gossip: transport closed")
	ErrTooLarge    = errors.New("gossip: message larger than the transport's max payload")
	ErrNoTransport = errors.New("gossip: no transport")
)

// Handler receives what a transport delivers. The Replicator is the Handler
// of its transports. All methods may be called concurrently from the
// transports' goroutines.
type Handler interface {
	// Receive is called for every message. from is the PoP the transport
	// vouches the message came from (the NATS subject's PoP; for memberlist,
	// the own PoP, whose members share its label and key). It must not block
	// and must not keep b after it returns.
	Receive(from identity.PoPID, kind Kind, b []byte)
	// Resync is called when peers may have missed messages: a member joined,
	// the connection came back. The handler should resend its own state soon.
	// It must not block.
	Resync()
	// LocalState returns the state a joining peer should learn at once
	// (memberlist push/pull). It may return nil.
	LocalState() []byte
	// MergeState merges a peer's LocalState. It must not keep b.
	MergeState(b []byte)
}

// Transport moves opaque messages to the peers in its reach: the members of
// the own PoP (memberlist) or every other PoP (NATS). Transports only move
// bytes and report membership; they know nothing of counters. Implementations
// are safe for concurrent use.
type Transport interface {
	// Name is a short name for metrics and logs: "memberlist", "nats", "hub".
	Name() string
	// Publish sends msg to every peer in reach, best effort. reliable asks
	// for a stream transport where there is a choice (anti-entropy batches);
	// it never blocks for long. msg must not be larger than
	// MaxPayload(reliable) and may be reused after Publish returns.
	Publish(kind Kind, msg []byte, reliable bool) error
	// MaxPayload returns the largest message Publish accepts.
	MaxPayload(reliable bool) int
	// Members returns the names of the peers currently in reach (the own
	// node excluded), sorted, or nil if the transport has no membership.
	Members() []string
	// Close stops the transport and waits for its goroutines. It is
	// idempotent.
	Close() error
}

// Relayer is implemented by transports between PoPs that can send a message
// to the nodes of one given PoP. On a PoP's sync request, and when it hears a
// PoP first or again after a silence, a node relays what it holds of that
// PoP's own replicas, so that a restarted node of a one-node PoP gets its
// former incarnation's counts back. Receivers get it as KindState from their
// own PoP; its counts can only raise theirs.
type Relayer interface {
	// Relay sends msg (KindState) to the nodes of PoP to. The same rules as
	// for Publish apply.
	Relay(to identity.PoPID, msg []byte) error
}

// Connect creates a transport that delivers to h.
type Connect func(h Handler) (Transport, error)

// RegionSpeaker is implemented by transports between PoPs whose
// subscriptions follow the node's role under region voices
// (repl.Settings.RegionVoices): a sync request reaches the PoPs of its
// sender's region and, of every other region, the PoP that speaks for it,
// since what a node needs of another region is its region's totals. The
// Replicator calls SpeakForRegion whenever its core's view of whether its
// PoP speaks for the region (repl.Core.RegionVoice) changes.
type RegionSpeaker interface {
	// SpeakForRegion makes the transport deliver other regions' sync
	// requests (on) or only the own region's (off). It must not block for
	// long and is safe to call with the value it already has.
	SpeakForRegion(on bool) error
}
