package repl

import (
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// Goodbyes: a node that stops cleanly says so.
//
// A PoP that crashes and one that is cut off are both silent (crash.go); a
// node that stops cleanly need not leave the others guessing. Its last act
// (Goodbye, after its last flush) is a goodbye to the other PoPs: a
// heartbeat that carries the control entry goodbyeKey, whose Count is how
// many members its PoP keeps after it (0: the PoP goes down with it). It
// goes on the PoP's own subject (LinkGlobal) and, with region voices, on
// the region subject (LinkRegion) too when the PoP goes down or speaks for
// its region, so that the other regions hear it as well; twice on each
// (goodbyeCopies).
//
// A PoP that says it goes down is taken for down at once, not cut off: it
// is silent for the partition checks (so the region's next PoP takes over
// as its voice at once, not after PeerTimeout) and the share policy keeps
// its last counts, as for a PoP that restarted (crash.go), instead of
// holding this side to its part of the fleet's traffic while the gone
// PoP's clients come here. A goodbye that leaves members behind changes
// nothing outside the PoP (memberlist tells the members): it is counted.
//
// What is trusted: a goodbye speaks only for the PoP whose subject it came
// through, as any heartbeat does (the sender must be a node of that PoP;
// Step counts it forged otherwise), so no PoP can take another for down.
// One of an epoch the PoP no longer has (a late copy after a restart) is
// ignored. The PoP is heard again from its next message sent after the
// goodbye; a region heartbeat that vouches for it (regionbeat.go) does not
// bring it back, since it may have been sent before its region heard the
// goodbye.
//
// A node of an older version takes a goodbye for a heartbeat (on the
// region subject: for a message it cannot place, counted forged) and times
// the PoP out as before. Two last members that stop at once each see the
// other: neither says the PoP goes down, and it times out as before.

// goodbyeKey marks a heartbeat as a goodbye (see above).
const goodbyeKey = "goodbye/1"

// goodbyeCopies is how many times a goodbye is sent on each link: it is
// the node's last word, never repaired by a later message, and a goodbye
// lost on a lossy link turns a clean stop into a silence taken for a cut.
// Copies are harmless: the first one takes the PoP down.
const goodbyeCopies = 2

// Goodbye queues the goodbye of this node (see above) for Ready. Call it
// once, when the node stops cleanly, after its last Flush: Ready hands out
// nothing after it, since a message sent after the goodbye would take the
// node for alive again.
func (c *Core) Goodbye(now int64) {
	if !c.started || !c.cfg.GlobalLink || c.bye != byeNone {
		return
	}
	left := uint64(max(len(c.members)-1, 0))
	bye := func() *wire.Delta {
		d := c.empty(now)
		d.Entries = []crdt.Entry{{Rule: controlRule, Key: goodbyeKey, Count: left}}
		return d
	}
	for range goodbyeCopies {
		c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindHeartbeat, Delta: bye()})
		if c.regionVoices() && (left == 0 || c.region.voice) {
			c.out = append(c.out, Message{Link: LinkRegion, Kind: KindHeartbeat, Delta: bye()})
		}
	}
	c.stats.Goodbyes++
	c.bye = byeQueued
}

// Where a Core's goodbye stands (Core.bye): none, queued for Ready, or
// handed out by Ready (nothing follows it).
const (
	byeNone uint8 = iota
	byeQueued
	byeSaid
)

// goodbyeOf reports whether d is a goodbye, and how many members its PoP
// keeps after its sender.
func goodbyeOf(d *wire.Delta) (left uint64, ok bool) {
	if len(d.Entries) != 1 || d.Entries[0].Rule != controlRule || d.Entries[0].Key != goodbyeKey {
		return 0, false
	}
	return d.Entries[0].Count, true
}

// stepGoodbye takes the goodbye d of a node of m.From, a PoP of another
// PoP than this node's (the caller checked that d.Sender belongs to it).
func (c *Core) stepGoodbye(now int64, m Message, d *wire.Delta, left uint64) {
	c.stats.GoodbyesHeard++
	p := c.peers.get(m.From)
	if p == nil || left != 0 || p.gone || (p.epoch != 0 && d.Epoch != 0 && d.Epoch != p.epoch) {
		return // unknown, not the PoP's last member, told, or a former epoch's
	}
	p.gone, p.goneSent = true, d.SentAt
	p.down = true
	c.checkPeers(now) // the share policy and the region's voice: at once
}

// heardFrom returns the state of PoP id for a message from it sent at
// sentAt (the sender's clock) that arrived at now: heard, unless it was
// sent before the PoP's goodbye (a late message of its last moments),
// which leaves it gone.
func (c *Core) heardFrom(id identity.PoPID, now, sentAt int64) *peer {
	p := c.peers.get(id)
	if p != nil && p.gone && sentAt <= p.goneSent {
		return p
	}
	return c.heardPeer(id, p, now)
}
