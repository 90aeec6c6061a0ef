package repl

import (
	"slices"
	"sort"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// Liveness: heartbeats in turns, the peer timeout, the unheard set told to
// the node, and what the node knows of the other PoPs.

func (c *Core) heartbeat(now int64) {
	c.stats.Heartbeats++
	d := c.empty(now)
	d.Entries = c.fingerprints()                                  // drift.go
	d.Entries = c.appendOffsets(d.Entries)                        // fleetclock.go
	d.Entries = c.appendRegionEpoch(d.Entries)                    // region.go
	d.Entries = c.appendMates(now, d.Entries)                     // mates.go
	link := c.heartbeatLink(now / int64(c.cfg.HeartbeatInterval)) // regionbeat.go
	c.out = append(c.out, Message{Link: link, Kind: KindHeartbeat, Delta: d})
}

func (c *Core) empty(now int64) *wire.Delta {
	return &wire.Delta{Sender: c.self, SentAt: now, Epoch: c.epoch}
}

// myTurn reports whether this member heartbeats in slot: members take turns
// in name order, so a PoP sends one heartbeat per interval. In the slots
// where the PoP sends its region's heartbeat (regionbeat.go) the members
// take turns over those slots, so that every member's clock and liveness
// reach the other regions however the two turns line up.
func (c *Core) myTurn(slot int64) bool {
	n := int64(len(c.members))
	if n > 1 && c.regionVoices() && c.regionTurn(slot) {
		slot /= int64(max(c.region.beats.turns, 1))
	}
	return n <= 1 || slot%n == int64(c.rank)
}

// checkPeers marks PoPs silent for longer than PeerTimeout as partitioned,
// forgets PoPs that are not expected and have been silent for ForgetAfter,
// and tells the node core when the unheard set changed.
func (c *Core) checkPeers(now int64) {
	var part []identity.PoPID
	for id, p := range c.peers.m {
		if !p.expected && now-p.lastHeard > int64(c.cfg.ForgetAfter) {
			c.peers.del(id)
			c.remote.ok = false // its slot may be given to another
			c.held.ok = false   // its epoch is no longer known (relay.go)
			if p.drift.n > 0 {
				c.clocked = slices.DeleteFunc(c.clocked, func(q *peer) bool { return q == p })
			}
			delete(c.relayTo, id)
			delete(c.relayLater, id)
			delete(c.waitingSince, id)
			delete(c.markTo, id)
			c.stats.ForgottenPoPs++
			continue
		}
		p.down = c.silent(p, now)
		if p.down && c.counts(p) && !c.awaited(p, now) {
			part = append(part, id)
		}
	}
	sort.Slice(part, func(i, j int) bool { return part[i].Less(part[j]) })
	c.updateRegion(now)                // region.go
	defer c.updateSparse(now)          // sparse.go, after the allowance
	defer c.updateAllowance(now, true) // latencies decayed, PoPs came or went
	same := c.partVersion > 0 && slices.Equal(part, c.partitioned)
	if !same {
		c.partitioned = part
		c.partVersion++
	}
	// Which PoPs are taken for down may change while the set stays the
	// same (crash.go: a region heard again since one of its PoPs fell
	// silent).
	unheard := c.cutOff(now, c.partitioned) // crash.go
	if same && slices.Equal(unheard, c.unheard) {
		return
	}
	names := c.unheardNames(unheard)
	c.tellDown(now, c.partitioned, names) // crash.go
	if c.partVersion > 1 && slices.Equal(unheard, c.unheard) {
		return
	}
	c.unheard = unheard
	// The share policy limits this side while PoPs are unheard. A PoP leaves
	// the set once something from it has arrived; the node holds its shares
	// a little longer while the rest of its counts come.
	c.node.SetPoPs(c.countingNames())
	c.node.SetUnheard(now, names)
}

// countingNames returns the names of the remote PoPs that count (Core.counts),
// sorted.
func (c *Core) countingNames() []string {
	var names []string
	for id, p := range c.peers.m {
		if c.counts(p) {
			names = append(names, id.String())
		}
	}
	sort.Strings(names)
	return names
}

// awaited reports whether p, a PoP of another region never heard, may
// still be heard first at now: with region voices such a PoP is heard
// through its region's heartbeat turns, which list the PoPs their sender
// heard, so where the region's PoPs start with this node their hellos are
// listed by the turns of the first whole heartbeat interval, after the
// first check of the peers (two intervals after the start). While the
// region's stream reaches this node (a region cut off sends nothing) but
// no turn of it has listed a PoP yet (a turn lists every PoP of a region
// that runs; one down is listed by none), and until one interval more,
// such a PoP is neither partitioned nor left out of the near-limit
// allowance's PoPs (countsNow). Without it a fleet's cold start took every
// other region for cut off at its first check (a quarter of a second of
// shares).
func (c *Core) awaited(p *peer, now int64) bool {
	return !p.heardOnce && now < c.firstCheck && c.regionVoices() && p.id.Region != c.selfPoP.Region &&
		c.regionHeard(p.id.Region) && !c.region.listed[p.id.Region]
}

// silent reports whether remote PoP p has been silent for longer than
// PeerTimeout, or never heard, or said goodbye (goodbye.go).
func (c *Core) silent(p *peer, now int64) bool {
	return p.gone || !p.heardOnce || now-p.lastHeard > int64(c.cfg.PeerTimeout)
}

// counts reports whether p's silence partitions this PoP: an expected PoP's
// does; without ExpectedPoPs, the silence of a PoP whose counts were merged.
// A PoP heard only through heartbeats or sync requests has no traffic share
// to take into account, so however many such PoPs go silent (invented ones
// on an open link among them), no share is cut.
func (c *Core) counts(p *peer) bool { return p.expected || (!c.hasExpected && p.counted) }

// Partitioned returns the remote PoPs counted as partitioned at the last
// heartbeat tick (sorted), and a version that changes whenever the set does
// (0 before the first check).
func (c *Core) Partitioned() ([]identity.PoPID, uint64) {
	return slices.Clone(c.partitioned), c.partVersion
}

// heard records a message from remote PoP id at now and returns its state,
// or nil when MaxPoPs PoPs are tracked already. A PoP heard for the first
// time or again after a silence is asked for its totals and sent what this
// PoP holds of its former epochs.
func (c *Core) heard(id identity.PoPID, now int64) *peer {
	return c.heardPeer(id, c.peers.get(id), now)
}

// heardPeer is heard with p, id's state as peers.get returns it.
func (c *Core) heardPeer(id identity.PoPID, p *peer, now int64) *peer {
	if p == nil {
		if len(c.peers.m) >= c.cfg.MaxPoPs {
			c.stats.UnknownPoPs++
			return nil
		}
		p = &peer{}
		c.peers.add(id, p)
	}
	joins := !p.heardOnce || now-p.lastHeard > int64(c.cfg.PeerTimeout) || p.down
	if joins {
		p.back = p.heardOnce // crash.go: a new epoch says it restarted
		p.heardSince = now
		// Ask for theirs too: links come back one direction at a time, and
		// what the other side sent when it heard us first may have been lost.
		// With region voices, what a PoP of another region sends this node
		// is its region's totals, heard first or again: its voice alone is
		// asked for them, and a PoP heard first of a region whose stream
		// already reaches this node asks nothing (at a cold start every
		// node hears every other region's PoPs for the first time through
		// the region's heartbeat turns, a second after its start: asking
		// then had every voice re-send its region's totals to the fleet
		// again, 39 % more entries merged in a 100-PoP fleet's first 4 s).
		switch {
		case !c.regionVoices() || (!p.heardOnce && id.Region == c.selfPoP.Region):
			c.askSyncFor(now, true)
		case p.heardOnce || !c.regionHeard(id.Region):
			c.askSyncOf(now, id, true) // sync.go: of it only
		}
		if _, ok := c.relayTo[id]; !ok {
			c.relayTo[id] = false // heard: relayed at most once per peer timeout
		}
	}
	p.down, p.gone = false, false
	if !p.heardOnce || now > p.lastHeard {
		p.lastHeard = now
	}
	p.heardOnce = true
	if joins {
		c.joinView(now, p) // it may count from now on
	}
	return p
}

// missedBeats records a heartbeat sent at sentAt (the sender's clock) and
// reports whether heartbeats in between went missing. Members of a PoP take
// turns, and one may die before the others notice: a gap up to two intervals
// and a half is normal.
func (c *Core) missedBeats(p *peer, sentAt int64) bool {
	prev := p.lastBeat
	if prev != 0 && sentAt <= prev {
		return false // duplicate or reordered
	}
	p.lastBeat = sentAt
	return prev != 0 && sentAt-prev > 5*int64(c.cfg.HeartbeatInterval)/2
}

// RemotePoP is what a node knows of another PoP.
type RemotePoP struct {
	identity.PoPID
	// LastHeard is the receiver's clock at the last message from it (Unix
	// nanoseconds); 0 if never heard.
	LastHeard int64 `json:"last_heard"`
	// Partitioned: silent for longer than PeerTimeout, or never heard, and
	// its silence counts (expected, or without ExpectedPoPs counted).
	Partitioned bool `json:"partitioned"`
	// Epoch is its current epoch, as its latest message said.
	Epoch uint64 `json:"epoch"`
	// Expected: named in Config.ExpectedPoPs. When some PoPs are, only they
	// count as partitioned.
	Expected bool `json:"expected"`
	// Counted: counts from it were merged, so it has a traffic share.
	// Without ExpectedPoPs, only such PoPs count as partitioned.
	Counted bool `json:"counted"`
}

// RemotePoPs returns the known remote PoPs, sorted.
func (c *Core) RemotePoPs(now int64) []RemotePoP {
	out := make([]RemotePoP, 0, len(c.peers.m))
	for id, p := range c.peers.m {
		rp := RemotePoP{PoPID: id, Epoch: p.epoch, Expected: p.expected, Counted: p.counted}
		if p.heardOnce {
			rp.LastHeard = p.lastHeard
		}
		rp.Partitioned = c.silent(p, now) && c.counts(p)
		out = append(out, rp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j].PoPID) })
	return out
}
