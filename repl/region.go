package repl

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/wire"
)

// Region voices (Settings.RegionVoices): inside a region the PoPs exchange
// their totals as without; between regions one PoP of each region, its
// voice, publishes the region's totals: for each key the sum of the
// region's PoP totals, as the count of one aggregate replica
// region/*/*#epoch on LinkRegion. What one node receives from other PoPs
// then grows with the PoPs of its region and the number of regions, not
// with every PoP of the fleet.
//
// The voice is the PoP of the region first by name among those this node
// hears (itself included) that can speak for the region: with
// ExpectedPoPs, the PoPs listed; without, those whose counts were merged
// (Core.counts). A PoP heard only through heartbeats (an invented one on
// an open link) takes no part, so it cannot silence the voice. Every PoP
// of the region hears the others, so they agree but for the moments a PoP
// comes or goes or starts publishing, when two may speak at once
// (harmless: a region total is a maximum-merged count under one identity)
// or none for a heartbeat interval. Inside the
// voice PoP a key's region total is published by the key's owner through
// the slot's speaker, like the PoP's totals.
//
// The region epoch keeps restarts from undercounting, one level above the
// PoP epoch. The region's PoPs agree on it (the lowest one heard wins) and
// keep it while any of them lives; it travels in their heartbeats and the
// voice's messages, and inside a PoP in the members' announcements and the
// region totals they forward to the slot's speaker (a node that restarts
// where no other PoP of its region is left learns it from its members). A
// voice that has heard none for two heartbeat intervals since it started
// (at once on a cold start) starts one, its PoP epoch: the region's
// history is then gone with its nodes, and the other regions keep the
// former epoch's totals beside the new ones until their windows pass. Under one epoch, a region
// total only grows: every PoP of the region holds every PoP total of the
// region, of every PoP epoch, and a voice that takes over publishes the
// same sums another published, a little later or earlier.
//
// A node of another region takes a region's totals only through a PoP of
// that region (the subject's PoP vouches for the sender's region), counts
// them as one replica of that region, and never takes its own region's:
// it holds the PoP totals they are made of. A region counts as unheard
// for the share policy ("region/*") when every PoP of it this node knows
// is.

// regionState is the Core's part of region voices.
type regionState struct {
	voice bool        // this node's PoP speaks for the region
	beats regionBeats // the region's heartbeat turns (regionbeat.go)
	epoch uint64      // the region epoch (0: not known yet)
	told  [2]uint64
	// sparseVoices are the voices of the region totals' sparse updates
	// told to the node (sparse.go).
	sparseVoices int
	// speech is what the speaker of the slot gathers of the region totals.
	speech []crdt.Entry
	// caches hold the intern IDs of other regions' aggregates, epochs
	// their current region epochs (noteRegionEpoch).
	caches map[string]*crdt.InternCache
	epochs map[string]uint64
	// lags holds the first latency sampled of each other region
	// (regionSampled); listed the other regions a heartbeat turn of which
	// listed a PoP (regionListed).
	lags   map[string]int64
	listed map[string]bool
	// formerDropped: another region's former totals were dropped while
	// its epoch was not known (stateRegion); asked for again once a
	// region's epoch is learned (noteRegionEpoch).
	formerDropped bool
}

// regionEpochKey marks a heartbeat entry that carries the sender's region
// epoch in its Count (the entry's Rule is the region).
const regionEpochKey = "regionepoch/1"

// regionVoices reports whether region voices are on for this node.
func (c *Core) regionVoices() bool { return c.voices }

// RegionVoices reports whether region voices are on for this node: set in
// its settings, or chosen by the fleet's shape (Settings.Voices).
func (c *Core) RegionVoices() bool { return c.voices }

// RegionVoice reports whether this node's PoP speaks for its region, and
// the region epoch (0: not known yet).
func (c *Core) RegionVoice() (voice bool, epoch uint64) { return c.region.voice, c.region.epoch }

// updateRegion works out whether this PoP is its region's voice, starts a
// region epoch when it may, and tells the node.
func (c *Core) updateRegion(now int64) {
	if !c.regionVoices() {
		return
	}
	voice := true
	for _, p := range c.regionMates() { // regionbeat.go
		if p.id.PoP >= c.selfPoP.PoP || !c.counts(p) {
			continue // only a PoP that can speak for the region takes part
		}
		// Before the first check of the peers, the PoPs expected are
		// taken as live: on a cold start they start together, and a node
		// that restarts would otherwise take its region's voice from the
		// PoP first by name before it hears it, publish its region's
		// totals to every PoP (a view it is still gathering) and hand the
		// voice back a moment later.
		if (p.heardOnce && !p.down && !c.silent(p, now)) || (!p.heardOnce && c.partVersion == 0) {
			voice = false
			break
		}
	}
	// The PoPs of the region heartbeat every HeartbeatInterval, with the
	// region epoch: one that lives is heard within two (one lost).
	wait := 2 * int64(c.cfg.HeartbeatInterval)
	if c.cfg.ColdStart {
		wait = 0
	}
	if voice && c.region.epoch == 0 && c.epoch != 0 && now-c.startedAt >= wait {
		c.region.epoch = c.epoch // the region's history is gone: a new epoch
		c.held.ok = false        // relay.go
		c.stats.RegionEpochChanges++
		c.askFormerRegion(now)
		c.announceRegion(now)
	}
	if voice && !c.region.voice && c.region.epoch != 0 {
		c.want |= wantRegionAE // taking over: every region total once
	}
	c.region.voice = voice
	c.updateRegionTurns(now) // regionbeat.go
	c.tellRegion()
}

// learnRegionEpoch takes a region epoch another PoP of the region
// announced: the lowest one wins.
func (c *Core) learnRegionEpoch(now int64, e uint64) {
	if e == 0 || e == c.region.epoch || (c.region.epoch != 0 && e > c.region.epoch) {
		return
	}
	known := c.region.epoch != 0
	c.region.epoch = e
	c.held.ok = false // relay.go
	c.stats.RegionEpochChanges++
	if !known {
		c.askFormerRegion(now)
	}
	if c.region.voice {
		c.want |= wantRegionAE
	}
	c.announceRegion(now)
	c.tellRegion()
}

// announceRegion tells the PoP's members the region epoch, as an empty
// delta of the region's aggregate (forwardedRegion): when the membership
// or the PoP epoch changes (with the PoP epoch's announcement) and when
// the region epoch does. A member that restarts where no other PoP of the
// region is heard learns it so, instead of starting one of its own.
func (c *Core) announceRegion(now int64) {
	if !c.regionVoices() || c.region.epoch == 0 || !c.hasMembers() {
		return
	}
	d := wire.Delta{Sender: identity.RegionReplica(c.selfPoP.Region, c.region.epoch), SentAt: now, Epoch: c.region.epoch}
	c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Delta: &d})
}

// tellRegion tells the node its region voice and epoch when they changed.
func (c *Core) tellRegion() {
	rv := c.node
	on := uint64(0)
	if c.region.voice {
		on = 1
	}
	if t := [2]uint64{on, c.region.epoch}; t != c.region.told {
		c.region.told = t
		rv.SetRegionVoice(c.region.voice, c.region.epoch)
	}
}

// appendRegionEpoch adds the region epoch to a heartbeat's entries.
func (c *Core) appendRegionEpoch(es []crdt.Entry) []crdt.Entry {
	if !c.regionVoices() || c.region.epoch == 0 {
		return es
	}
	return append(es, crdt.Entry{Rule: c.selfPoP.Region, Key: regionEpochKey, Count: c.region.epoch})
}

// takeRegionEpoch learns the region epoch from a heartbeat of another PoP
// of the region.
func (c *Core) takeRegionEpoch(now int64, from identity.PoPID, d *wire.Delta) {
	if !c.regionVoices() {
		return
	}
	for _, e := range d.Entries {
		if e.Key != regionEpochKey || e.Rule != from.Region {
			continue
		}
		if from.Region == c.selfPoP.Region {
			c.learnRegionEpoch(now, e.Count)
		} else {
			c.noteRegionEpoch(now, from.Region, e.Count)
		}
		return
	}
}

// flushRegion is the region part of a flush slot: the owned region totals
// that moved go to the slot's speaker (gathered here, or forwarded over the
// PoP link), which publishes them as one message to the other regions.
func (c *Core) flushRegion(now int64, speaker bool) {
	if !c.region.voice || c.region.epoch == 0 {
		return
	}
	d := c.node.FlushRegion(now, c.ownsKey)
	if len(d.Entries) == 0 {
		return
	}
	switch {
	case speaker:
		c.region.speech = append(c.region.speech, d.Entries...)
	case c.hasMembers():
		c.stats.Forwards++
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Delta: &d})
	default:
		c.out = append(c.out, Message{Link: LinkRegion, Kind: KindDelta, Delta: &d})
	}
}

// speakRegion publishes the region totals gathered for the slot.
func (c *Core) speakRegion(now int64) {
	if len(c.region.speech) > 0 && c.region.voice && c.region.epoch != 0 {
		d := wire.Delta{Sender: identity.RegionReplica(c.selfPoP.Region, c.region.epoch), SentAt: now, Epoch: c.region.epoch, Entries: c.region.speech}
		c.out = append(c.out, Message{Link: LinkRegion, Kind: KindDelta, Delta: &d})
	}
	c.region.speech = nil
}

// forwardedRegion takes a member's region totals: the speaker of the slot
// gathers them, or publishes them at once when it gathers none; the other
// members ignore them. They teach the member's region epoch (the lowest
// wins; an empty one only announces it, announceRegion), as no other PoP
// of the region may be left to: totals of another region epoch are
// dropped.
func (c *Core) forwardedRegion(now int64, d *wire.Delta) bool {
	if c.regionVoices() {
		c.learnRegionEpoch(now, d.Sender.Incarnation)
		if !hasContent(d) {
			return true
		}
	}
	if !c.region.voice || c.region.epoch == 0 || d.Sender.Incarnation != c.region.epoch {
		return false
	}
	slot, cur := c.slotOf(d.SentAt), c.slotOf(now)
	if span := int64(c.node.MaxSkew()/c.cfg.FlushInterval) + 1; slot < cur-span || slot > cur+span {
		return false
	}
	if !c.speaker(slot) {
		return true
	}
	entries := c.validTotals(now, d.Entries)
	if len(entries) == 0 {
		return true
	}
	if c.speakAt != 0 {
		c.region.speech = append(c.region.speech, entries...)
		return true
	}
	late := wire.Delta{Sender: d.Sender, SentAt: now, Epoch: c.region.epoch, Entries: entries}
	c.out = append(c.out, Message{Link: LinkRegion, Kind: KindDelta, Delta: &late})
	return true
}

// regionAE re-sends part of parts of the owned region totals.
func (c *Core) regionAE(now int64, part, parts int, changed bool) {
	if !c.region.voice || c.region.epoch == 0 {
		return
	}
	d := c.node.RegionAntiEntropyPart(now, c.ownsKey, part, parts, changed)
	if len(d.Entries) > 0 {
		c.out = append(c.out, Message{Link: LinkRegion, Kind: KindDelta, Reliable: true, Delta: &d})
	}
}

// stepRegion takes region totals published by PoP m.From's region, or the
// penalty blocks of PoP m.From of another region.
func (c *Core) stepRegion(now int64, m Message, res *StepResult) {
	d := m.Delta
	if isRegionBeat(&m) {
		c.stepRegionBeat(now, m, res) // regionbeat.go
		return
	}
	if d.Sender.IsPoP() && !d.Sender.IsRegion() && d.Sender.PoPID == m.From && len(d.Entries) == 0 && blocks.Section.Len(d) > 0 {
		// A PoP's penalty blocks, sent to every PoP (Core.publish).
		if m.From != c.selfPoP && c.regionVoices() && m.From.Region != c.selfPoP.Region {
			res.Applied = c.node.ApplyFrom(now, d, replicated.ScopeGlobal, nil)
		}
		return
	}
	if !d.Sender.IsRegion() || d.Sender.Region != m.From.Region || m.From == c.selfPoP || d.Sender.Incarnation == 0 {
		res.Forged = true
		return
	}
	if !c.regionVoices() {
		return
	}
	p := c.heardFrom(m.From, now, d.SentAt) // goodbye.go
	if p == nil {
		return
	}
	c.observe(now, d.SentAt, p)
	if m.From.Region == c.selfPoP.Region {
		// The own region's voice: its epoch, not its counts (this node
		// holds the PoP totals they sum).
		c.learnRegionEpoch(now, d.Sender.Incarnation)
		return
	}
	c.noteRegionEpoch(now, d.Sender.Region, d.Sender.Incarnation)
	if !hasContent(d) {
		return
	}
	if c.applyRegionTotals(now, d, res) {
		p.counted = true
	}
}

// applyRegionTotals merges the totals of another region d carries, and
// reports whether any counted.
func (c *Core) applyRegionTotals(now int64, d *wire.Delta, res *StepResult) bool {
	if c.region.caches == nil {
		c.region.caches = map[string]*crdt.InternCache{}
	}
	ic := c.region.caches[d.Sender.Region]
	if ic == nil {
		if len(c.region.caches) >= c.cfg.MaxPoPs {
			ic = &crdt.InternCache{}
		} else {
			ic = &crdt.InternCache{}
			c.region.caches[d.Sender.Region] = ic
		}
	}
	res.Applied = c.node.ApplyFrom(now, d, replicated.ScopeGlobal, ic)
	return res.Applied.Merged+res.Applied.Unchanged > 0
}

// unheardRegions adds to names "region/*" for each other region whose every
// known PoP is in part, so that the share policy freezes its aggregate.
func (c *Core) unheardRegions(part []identity.PoPID, names []string) []string {
	if !c.regionVoices() || len(part) == 0 {
		return names
	}
	down := map[string]bool{}
	for _, id := range part {
		if id.Region != c.selfPoP.Region {
			down[id.Region] = true
		}
	}
	for id, p := range c.peers.m {
		if !p.down && down[id.Region] {
			down[id.Region] = false // a PoP of it is heard
		}
	}
	for _, id := range part {
		if down[id.Region] {
			names = append(names, id.Region+"/"+identity.RegionPoP)
			down[id.Region] = false // once
		}
	}
	return names
}

// SetRegionVoice forwards to the node core.
func (f fleetNode) SetRegionVoice(on bool, epoch uint64) {
	f.Node.SetRegionVoice(on, epoch)
}

// FlushRegion forwards to the node core when it can speak for its region.
func (f fleetNode) FlushRegion(now int64, owns func(key string) bool) wire.Delta {
	d := f.Node.FlushRegion(now+*f.corr, owns)
	d.SentAt = now // the Core's clock, as sentAt dates the batches
	return d
}

// RegionAntiEntropyPart forwards to the node core when it can speak for
// its region.
func (f fleetNode) RegionAntiEntropyPart(now int64, owns func(key string) bool, part, parts int, changed bool) wire.Delta {
	d := f.Node.RegionAntiEntropyPart(now+*f.corr, owns, part, parts, changed)
	d.SentAt = now
	return d
}

// SetRegionSparse forwards to the node core when it can speak for its
// region.
func (f fleetNode) SetRegionSparse(voices int, lag time.Duration) {
	f.Node.SetRegionSparse(voices, lag)
}

// regionCount returns how many regions this node knows: its own and those
// of the remote PoPs tracked.
func (c *Core) regionCount() int {
	seen := map[string]bool{c.selfPoP.Region: true}
	for id := range c.peers.m {
		seen[id.Region] = true
	}
	return len(seen)
}

// regionEpochOf returns the current region epoch of region as this node
// knows it (0: not known).
func (c *Core) regionEpochOf(region string) uint64 {
	if region == c.selfPoP.Region {
		return c.region.epoch
	}
	return c.region.epochs[region]
}

// noteRegionEpoch records the current region epoch of another region, as
// its voice's totals or its PoPs' heartbeats say; at most MaxPoPs regions.
// The first epoch learned of a region asks again for the former totals
// dropped meanwhile.
func (c *Core) noteRegionEpoch(now int64, region string, e uint64) {
	if e == 0 || region == c.selfPoP.Region {
		return
	}
	if c.region.epochs == nil {
		c.region.epochs = map[string]uint64{}
	}
	was, ok := c.region.epochs[region]
	if (ok || len(c.region.epochs) < c.cfg.MaxPoPs) && was != e {
		c.region.epochs[region] = e
		c.held.changed(identity.PoPID{Region: region, PoP: identity.RegionPoP}) // relay.go
	}
	if !ok && c.region.formerDropped {
		c.region.formerDropped = false
		c.askSyncFor(now, true)
	}
}

// stateRegion takes a region's former totals relayed by PoP m.From: of
// the own region (its nodes all restarted: what they admitted before) or,
// after a sync request, of another; and its current totals from a PoP of
// that region, its voice's answer to this PoP's sync request. No other PoP
// relays a region's current epoch; while the epoch is not known, the state
// is dropped and asked for again once it is.
func (c *Core) stateRegion(now int64, m Message, res *StepResult) {
	d := m.Delta
	cur := c.regionEpochOf(d.Sender.Region)
	switch {
	case !c.regionVoices():
	case cur != 0 && d.Sender.Incarnation == cur && m.From.Region == d.Sender.Region && m.From.Region != c.selfPoP.Region:
		// Its voice's answer to this PoP's sync request (sync.go): what
		// it publishes to every PoP, sent to this one alone.
		c.applyRegionTotals(now, d, res)
	case d.Sender.Incarnation == 0 || d.Sender.Incarnation == cur:
		res.Forged = true
	case cur == 0:
		res.Dropped = true
		c.stats.StateDropped++
		if d.Sender.Region != c.selfPoP.Region {
			c.region.formerDropped = true // asked again (noteRegionEpoch)
		}
	default:
		res.Applied = c.node.ApplyFrom(now, d, replicated.ScopeGlobal, nil)
	}
}

// askFormerRegion asks the other PoPs for their totals once this node
// knows its region epoch: the other regions relay a former one's totals
// only to a PoP whose request names the current one (dropped meanwhile).
// Not on a cold start, which has no history.
func (c *Core) askFormerRegion(now int64) {
	if !c.cfg.ColdStart || c.partVersion > 0 {
		if c.syncing {
			// The startup sync waits for the answers to this request:
			// the markers of the requests before it came without them.
			for _, p := range c.peers.m {
				p.marked = 0
			}
		}
		c.askSync(now)
	}
}

// otherRegion reports whether r is a PoP's replica of another region while
// region voices are on: its counts reach this node in its region's total,
// so a PoP total of it (a relay, a publish on a subject this node should
// not hear) would count them twice.
func (c *Core) otherRegion(r identity.Replica) bool {
	return c.regionVoices() && r.Region != c.selfPoP.Region && !r.IsRegion()
}
