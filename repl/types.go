package repl

import (
	"strconv"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// MemberName is the name a node goes by in its PoP's membership
// (memberlist): node#incarnation, so that a restarted node is a new member.
// Every member computes key ownership over these names, so the transport and
// the Core must use this same function.
func MemberName(r identity.Replica) string {
	return r.Node + "#" + strconv.FormatUint(r.Incarnation, 10)
}

// Kind says what a message carries.
type Kind uint8

// Message kinds.
const (
	// KindDelta is a batch of counts: a member's own counts inside the PoP,
	// the PoP's totals between PoPs.
	KindDelta Kind = iota
	// KindHeartbeat is a delta without entries sent between PoPs: "this PoP
	// is alive and can reach you". A PoP's members take turns, so a PoP
	// sends one heartbeat stream whatever its size.
	KindHeartbeat
	// KindSync is a delta without entries sent between PoPs by a PoP that
	// has just heard another PoP first or again: "send me your totals".
	KindSync
	// KindState is a delta of former totals (an earlier epoch) of the
	// receiving PoP or, when it asked for a sync, of any PoP, relayed to it
	// by another PoP that holds them.
	KindState
)

func (k Kind) String() string {
	switch k {
	case KindHeartbeat:
		return "heartbeat"
	case KindSync:
		return "sync"
	case KindState:
		return "state"
	}
	return "delta"
}

// Link is where a message travels.
type Link uint8

// Links.
const (
	// LinkPoP reaches the other members of the own PoP (memberlist).
	LinkPoP Link = iota
	// LinkGlobal reaches every other PoP (NATS), or one PoP for KindState.
	// With Settings.RegionVoices, a PoP's totals (KindDelta) need reach
	// only the PoPs of its own region.
	LinkGlobal
	// LinkRegion reaches every other PoP of every region (NATS): a region's
	// totals, published by its voice (region.go). Inbound, From is the PoP
	// that published them.
	LinkRegion
)

func (l Link) String() string {
	switch l {
	case LinkPoP:
		return "pop"
	case LinkRegion:
		return "region"
	}
	return "global"
}

// Message is one message to send (from Ready) or one that arrived (to Step).
type Message struct {
	Link Link
	Kind Kind
	// To is, for an outbound KindState, the PoP to relay to.
	To identity.PoPID
	// From is, for an inbound message, the PoP the transport vouches it came
	// from: the NATS subject's PoP (for KindState the relaying PoP; the
	// transport delivers only state meant for the own PoP), or the own PoP
	// for LinkPoP.
	From identity.PoPID
	// Reliable asks for a stream transport where there is a choice: large
	// anti-entropy batches.
	Reliable bool
	// Delta is the payload. Outbound deltas are fresh and may be kept;
	// an inbound delta is not kept after Step returns.
	Delta *wire.Delta
}
