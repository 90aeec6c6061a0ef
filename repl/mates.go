package repl

import (
	"sort"
	"strings"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// What the PoPs of a region hear of each other: a down PoP told from a cut
// one at its first silence.
//
// Every heartbeat lists the PoPs of the sender's region it hears and how
// long ago it last heard each (live/1: entries, as a region's heartbeat
// does, regionbeat.go), and the sender itself, which says that it lists.
// A PoP that dies falls silent to its region's PoPs as well: their lists
// drop it once it has been silent to them for PeerTimeout. So a silent PoP
// p is taken for down (crash.go) when a PoP of p's region that this node
// still hears sent a list well after p's last message here, and no list of
// p's region says p was heard since shortly after that message. A cut
// between regions, the usual partition, leaves p heard by its region: the
// lists this node still gets (none, when the whole region is cut off) do
// not take it for down. Without region voices this tells the first crash of
// a PoP from a cut when its region has another PoP; with them, the same for
// a PoP of the node's own region (the other regions' PoPs are told by
// their region's heartbeats).
//
// If p is cut off from its whole region as well as from this node, it is
// taken for down and spends its share on its side while the others spend
// the rest: at most 1 + its share of the limit, where keep allows every
// side the whole limit. What is trusted: a list speaks for PoPs of its
// sender's region only, and only of PoPs this node tracks already.

// appendMates adds to es the PoPs of the own region this node hears at
// now (those that can count, sorted), and this PoP, which says it lists.
func (c *Core) appendMates(now int64, es []crdt.Entry) []crdt.Entry {
	es = append(es, crdt.Entry{Rule: controlRule, Key: liveKeyPrefix + c.selfPoP.String()})
	for _, id := range c.heardMates(now) {
		ago := max(now-c.peers.get(id).lastHeard, 0) / 1e6
		es = append(es, crdt.Entry{Rule: controlRule, Key: liveKeyPrefix + id.String(), Count: uint64(ago)})
	}
	return es
}

// heardMates returns the PoPs of the own region that can count and that
// this node hears at now, sorted.
func (c *Core) heardMates(now int64) []identity.PoPID {
	ids := make([]identity.PoPID, 0, len(c.regionMates()))
	for _, p := range c.regionMates() {
		if c.counts(p) && p.heardOnce && !c.silent(p, now) {
			ids = append(ids, p.id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	return ids
}

// stepMates takes the list of a heartbeat of PoP q (from) that arrived at
// now: when each PoP of q's region it names was last heard there.
func (c *Core) stepMates(now int64, q *peer, from identity.PoPID, d *wire.Delta) {
	listed := false
	for _, e := range d.Entries {
		if e.Rule != controlRule || !strings.HasPrefix(e.Key, liveKeyPrefix) {
			continue
		}
		id, err := identity.ParsePoPID(e.Key[len(liveKeyPrefix):])
		if err != nil || id.Region != from.Region {
			continue // it speaks for its own region only
		}
		if id == from {
			listed = true
			continue
		}
		p := c.peers.get(id)
		if p == nil || id == c.selfPoP {
			continue
		}
		p.mateSaw = max(p.mateSaw, now-int64(min(e.Count, uint64(c.cfg.PeerTimeout/1e6)))*1e6)
	}
	if listed {
		q.listedAt = now
	}
}

// listedAt returns, when part is not empty, for each region the latest
// arrival of a list from one of its PoPs this node does not take for
// silent: one walk over the PoPs for the whole unheard set.
func (c *Core) listedAt(part []identity.PoPID) map[string]int64 {
	if len(part) == 0 {
		return nil
	}
	at := map[string]int64{}
	for id, q := range c.peers.m {
		if !q.down && q.listedAt > at[id.Region] {
			at[id.Region] = q.listedAt
		}
	}
	return at
}

// matesHearItGone reports whether silent PoP p is silent to its region too:
// a PoP of its region this node hears listed what it hears more than twice
// PeerTimeout after p's last message here (listed, listedAt's for p's
// region; by then p was off the lists of every PoP that no longer heard
// it), and no list said p was heard later than half a PeerTimeout after
// that message. p, silent, is down itself and not among those listedAt
// reads.
func (c *Core) matesHearItGone(p *peer, listed int64) bool {
	pt := int64(c.cfg.PeerTimeout)
	return p.mateSaw <= p.lastHeard+pt/2 && listed > p.lastHeard+2*pt
}
