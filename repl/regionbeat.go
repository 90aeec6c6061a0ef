package repl

import (
	"strings"

	"github.com/geolimit/geolimit/identity"
)

// Liveness through the regions (Settings.RegionVoices). A PoP's heartbeats
// reach only the PoPs of its region, as its totals do. Towards the other
// regions a region sends one heartbeat stream: the PoPs of the region that
// can speak for it take turns, one per heartbeat slot in name order (as
// the members of a PoP take turns inside it), and the PoP whose turn it is
// sends its heartbeat to every PoP on LinkRegion instead, with the PoPs of
// its region it hears and how long ago it last heard each. A node of
// another region takes them as heard that long ago, so it knows which PoPs
// of every region live (status, the share policy, the allowance) while it
// hears one heartbeat stream per region: inbound heartbeats per node grow
// with the PoPs of its region plus the regions, not with every PoP.
//
// A region whose PoPs all fall silent, or that is cut off, stops its
// stream: its PoPs time out after PeerTimeout, as if each were heard. A PoP
// that dies in a region is no longer listed once its region's PoPs stop
// hearing it, and times out elsewhere PeerTimeout after it was last heard
// in its region. A turn of a PoP that died is a gap of one interval until
// its region notices; a heartbeat gap of the stream (more than two and a
// half intervals) asks the region's voice to re-send the region's totals.
//
// What is trusted: a region's heartbeat speaks only for the PoPs of the
// region of the subject it came through, never for the receiver's own
// region (it hears those itself), and at most MaxPoPs PoPs are tracked. A
// PoP it lists that this node does not expect is tracked as heard but,
// never counted, cuts no share when it falls silent (Core.counts); it
// takes no part in electing any region's voice.

// liveKeyPrefix prefixes the key of a control entry of a region heartbeat
// naming a PoP of the sender's region ("region/pop") its sender hears; the
// entry's Count is how long ago it last heard it, in milliseconds.
const liveKeyPrefix = "live/1:"

// regionBeats are the region heartbeat's parts of regionState.
type regionBeats struct {
	// rank and turns place this PoP in its region's turns (turns 0: not
	// one of them), as updateRegionTurns last found.
	rank, turns int
	// last is the SentAt of the latest heartbeat of each other region's
	// stream (missedRegionBeats); at most MaxPoPs regions.
	last map[string]int64
	// mates are the tracked PoPs of the own region as of peers.gen
	// matesGen (regionMates).
	mates    []*peer
	matesGen uint64
}

// regionMates returns the tracked PoPs of the own region, from a list kept
// until a PoP is added or deleted: the region's work (its voice, its
// heartbeat turns) then costs the PoPs of the region, not every PoP known.
func (c *Core) regionMates() []*peer {
	b := &c.region.beats
	if b.matesGen != c.peers.gen || b.mates == nil {
		b.mates = b.mates[:0]
		for id, p := range c.peers.m {
			if id.Region == c.selfPoP.Region {
				b.mates = append(b.mates, p)
			}
		}
		if b.mates == nil {
			b.mates = []*peer{}
		}
		b.matesGen = c.peers.gen
	}
	return b.mates
}

// updateRegionTurns works out this PoP's place in its region's heartbeat
// turns: itself and the PoPs of the region that can speak for it (the
// voice's electorate, updateRegion) heard and not silent, in name order.
func (c *Core) updateRegionTurns(now int64) {
	if !c.regionVoices() {
		return
	}
	rank, n := 0, 1
	for _, p := range c.regionMates() {
		id := p.id
		if !c.counts(p) {
			continue
		}
		if (p.heardOnce && !p.down && !c.silent(p, now)) || (c.cfg.ColdStart && !p.heardOnce && c.partVersion == 0) {
			n++
			if id.PoP < c.selfPoP.PoP {
				rank++
			}
		}
	}
	c.region.beats.rank, c.region.beats.turns = rank, n
}

// regionTurn reports whether the heartbeat of slot goes to every region.
func (c *Core) regionTurn(slot int64) bool {
	b := &c.region.beats
	return b.turns <= 1 || slot%int64(b.turns) == int64(b.rank)
}

// heartbeatLink returns where the heartbeat of slot goes.
func (c *Core) heartbeatLink(slot int64) Link {
	if !c.regionVoices() {
		return LinkGlobal
	}
	if !c.regionTurn(slot) {
		return LinkGlobal // to the PoPs of the region only
	}
	return LinkRegion // with the PoPs it hears (mates.go)
}

// isRegionBeat reports whether a message on LinkRegion is a region
// heartbeat: a node's (not an aggregate's) of the PoP it came from, that
// carries what a heartbeat does and no counts.
func isRegionBeat(m *Message) bool {
	d := m.Delta
	if d.Sender.IsPoP() || d.Sender.PoPID != m.From || sectionItems(d) > 0 {
		return false
	}
	for _, e := range d.Entries {
		switch {
		case e.Key == fingerprintKey, e.Key == offsetKey, e.Key == regionEpochKey:
		case e.Rule == controlRule && e.Key == goodbyeKey && len(d.Entries) == 1:
		case e.Rule == controlRule && strings.HasPrefix(e.Key, liveKeyPrefix):
		default:
			return false // counts: not a heartbeat
		}
	}
	return true
}

// stepRegionBeat handles a region heartbeat of PoP m.From: from the own
// region, that PoP's heartbeat; from another, its region's, with the PoPs
// it hears.
func (c *Core) stepRegionBeat(now int64, m Message, res *StepResult) {
	if m.From == c.selfPoP || !c.regionVoices() {
		return
	}
	if m.From.Region == c.selfPoP.Region {
		c.stepGlobal(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: m.From, Delta: m.Delta}, res)
		return
	}
	d := m.Delta
	if left, ok := goodbyeOf(d); ok {
		c.stepGoodbye(now, m, d, left) // goodbye.go
		return
	}
	p := c.heardFrom(m.From, now, d.SentAt) // goodbye.go
	if p == nil {
		return
	}
	c.observe(now, d.SentAt, p)
	if d.Epoch != 0 {
		// Heard again under a new epoch after a silence, it restarted
		// (crash.go): a PoP alone in its region, whose region's stream
		// is its own, tells a crash so, as its own heartbeats would.
		c.epochHeard(p, d.Epoch)
		c.setPeerEpoch(p, d.Epoch)
	}
	c.checkDrift(now, p, d)
	c.takeRegionEpoch(now, m.From, d)
	if c.missedRegionBeats(m.From.Region, d.SentAt) {
		c.askSyncOf(now, m.From, false) // sync.go: the region's voice
	}
	for _, e := range d.Entries {
		if e.Rule != controlRule || !strings.HasPrefix(e.Key, liveKeyPrefix) {
			continue
		}
		id, err := identity.ParsePoPID(e.Key[len(liveKeyPrefix):])
		if err != nil || id.Region != m.From.Region || id == m.From {
			continue // it speaks for its own region only
		}
		c.vouched(now, id, d.SentAt, int64(min(e.Count, uint64(c.cfg.PeerTimeout/1e6)))*1e6)
		c.regionListed(m.From.Region)
	}
}

// regionListed records that a heartbeat turn of region listed a PoP it
// hears (liveness.go: awaited).
func (c *Core) regionListed(region string) {
	if c.region.listed[region] {
		return
	}
	if c.region.listed == nil {
		c.region.listed = map[string]bool{}
	}
	if len(c.region.listed) < c.cfg.MaxPoPs {
		c.region.listed[region] = true
	}
}

// vouched records that PoP id, of another region, was heard ago
// nanoseconds before a region heartbeat sent at sentAt arrived at now.
func (c *Core) vouched(now int64, id identity.PoPID, sentAt, ago int64) {
	p := c.peers.get(id)
	if p == nil {
		if len(c.peers.m) >= c.cfg.MaxPoPs {
			c.stats.UnknownPoPs++
			return
		}
		p = &peer{}
		c.peers.add(id, p)
	}
	at := now - ago
	joins := !p.heardOnce || p.down || at-p.lastHeard > int64(c.cfg.PeerTimeout)
	if joins {
		p.heardSince = at // crash.go
	}
	if !p.heardOnce || at > p.lastHeard {
		p.lastHeard = at
	}
	p.heardOnce = true
	p.down = c.silent(p, now)
	if joins {
		c.joinView(now, p) // it may count from now on
	}
	c.observe(now, sentAt, p) // its totals reach this node as its region's
}

// missedRegionBeats records a heartbeat of region's stream sent at sentAt
// and reports whether some went missing (see missedBeats).
func (c *Core) missedRegionBeats(region string, sentAt int64) bool {
	b := &c.region.beats
	if b.last == nil {
		b.last = map[string]int64{}
	}
	prev, ok := b.last[region]
	if !ok && len(b.last) >= c.cfg.MaxPoPs {
		return false
	}
	if ok && sentAt <= prev {
		return false
	}
	b.last[region] = sentAt
	return ok && sentAt-prev > 5*int64(c.cfg.HeartbeatInterval)/2
}
