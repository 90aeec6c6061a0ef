package repl

import (
	"slices"
	"sort"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// relayFor schedules the relay a sync request of PoP from asks for: every
// former epoch this PoP holds that from may lack, whatever the throttle,
// for a request that names no one; its own former epochs, at most once
// per peer timeout, for one that names this PoP (asked alone, as a PoP
// heard again or after a heartbeat gap is).
func (c *Core) relayFor(from identity.PoPID, scoped bool) {
	if !scoped {
		c.relayTo[from] = true
	} else if _, ok := c.relayTo[from]; !ok {
		c.relayTo[from] = false
	}
}

// relay sends each PoP in relayTo what this node holds of that PoP's former
// epochs, so that a PoP whose nodes all restarted counts what it admitted
// before, and, to a PoP that asked for a sync, of every PoP's former epochs
// (see former). One member per target PoP relays, at most once per
// PeerTimeout and epoch of the target (each time it asks, at most once per
// coalescing interval). A relay of other PoPs' former epochs to a PoP that
// asked is paced like the re-send of the owned totals: one per
// SyncInterval, whoever asks: PoPs with a traffic share first, and among
// them the one that has waited longest (so that one that keeps asking
// never starves the others); the others wait in relayLater. What this node
// holds of the asking PoP's own former epochs (a restarted PoP's counts) is
// not paced: it goes at once, once per epoch of that PoP, bounded by what
// that PoP sent.
func (c *Core) relay(now int64) {
	if !c.cfg.Relay || !c.cfg.GlobalLink {
		clear(c.relayTo)
		clear(c.relayLater)
		return
	}
	if c.epoch == 0 {
		return // later: which epoch is whose is not known yet
	}
	targets := c.relayTo
	c.relayTo = map[identity.PoPID]bool{}
	ids := make([]identity.PoPID, 0, len(targets))
	for id := range targets {
		ids = append(ids, id)
	}
	since := func(id identity.PoPID) int64 {
		if at, ok := c.waitingSince[id]; ok {
			return at
		}
		return now
	}
	sort.Slice(ids, func(i, j int) bool {
		si, sj := c.standing(ids[i]), c.standing(ids[j])
		if si != sj {
			return si
		}
		if wi, wj := since(ids[i]), since(ids[j]); wi != wj {
			return wi < wj
		}
		return ids[i].Less(ids[j])
	})
	var state []wire.Delta
	var held *heldAggregates
	for _, id := range ids {
		asked := targets[id]
		p := c.peers.get(id)
		if p == nil || !c.ownsTask("relay/"+id.String()) {
			continue
		}
		if p.relayed && p.relayedTo == p.epoch && now >= p.relayedAt {
			// A PoP heard again: once per peer timeout and epoch. A PoP
			// that asks: each time it is answered (at most once per
			// SyncInterval), but once per coalescing interval.
			if wait := now - p.relayedAt; (!asked && wait < int64(c.cfg.PeerTimeout)) || wait < c.coalesce() {
				continue
			}
		}
		if held == nil {
			h := c.heldAggregates()
			held = &h
		}
		paced := asked && held.formerKnown(c) // other PoPs' former epochs go
		if paced && now < c.relayTAT {
			c.relayLater[id] = true
			if _, ok := c.waitingSince[id]; !ok {
				c.waitingSince[id] = now
			}
			c.stats.RelaysDeferred++
			// Its own former epochs go now, once per epoch of it (a
			// restarted PoP is never queued for its own counts); the rest
			// waits its turn.
			paced, asked = false, false
			if !held.holdsFormer(c, id, false) || (p.relayed && p.relayedTo == p.epoch) {
				continue
			}
		} else {
			delete(c.waitingSince, id)
		}
		p.relayed, p.relayedAt, p.relayedTo = true, now, p.epoch
		if !held.holdsFormer(c, id, asked) {
			continue // the common case: nothing to relay, no scan of the store
		}
		if state == nil {
			state = c.node.State(now)
		}
		sent := false
		for i := range state {
			d := &state[i]
			if !d.Sender.IsPoP() || len(d.Entries) == 0 || !c.former(d.Sender, id, asked) {
				continue
			}
			copies := 1
			if d.Sender.PoPID == id {
				copies = relayCopies // its own former counts (see relayCopies)
			}
			for range copies {
				dd := *d
				c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindState, To: id, Reliable: true, Delta: &dd})
			}
			sent = true
		}
		if sent {
			c.stats.Relays++
		}
		if paced {
			c.relayTAT = now + int64(c.cfg.SyncInterval)
		}
	}
}

// relayCopies is how many times a relay sends the totals of the target
// PoP's own former epochs: a restarted PoP counts what it admitted before
// only from them (once per epoch of it, bounded by what it sent), no later
// message repairs one that was lost (the marker that ends the relay may
// still arrive), and a lost relay left a restarted PoP blind to its own
// former counts for the rest of the window (a key at 1.25 of its limit, 1 %
// loss between two regions, a PoP of three nodes stopped every 5 s; 1.04
// at other seeds or without loss). Copies are harmless: totals merge by
// maximum.
const relayCopies = 2

// standing reports whether remote PoP id has a traffic share (its counts
// were merged) or is expected.
func (c *Core) standing(id identity.PoPID) bool {
	p := c.peers.get(id)
	return p != nil && (p.counted || p.expected)
}

// heldAggregates is what relay needs to know of the PoP aggregates this
// node holds counts of, read once per relay rather than once per target
// (with hundreds of PoPs, looking every PoP's epoch up for each target was
// most of a relay's time), and only as far as the targets need: a relay to
// a PoP heard first, at a cold start of a fleet of hundreds, needs the
// epochs held of that PoP and its region only, and building the table of
// every PoP's for each was most of such a start.
type heldAggregates struct {
	reps []identity.Replica // the store's replicas, read once
	// byPoP holds the epochs held of each PoP, built once more than
	// heldScan targets were looked up; before, each look-up scans reps.
	byPoP   map[identity.PoPID][]uint64
	lookups int
	// former: one of them is an epoch other than its PoP's current one,
	// which is known; relayed to any PoP that asks (see former). Computed
	// at the first relay to a PoP that asked (formerSet).
	former, formerSet bool
}

// heldScan is how many targets a relay looks up by scanning the store's
// replicas before it builds heldAggregates.byPoP.
const heldScan = 8

func (c *Core) heldAggregates() heldAggregates {
	return heldAggregates{reps: c.node.Replicas()}
}

// formerKnown reports whether the node holds an epoch of a PoP (or a
// region) other than its current one, which is known.
func (h *heldAggregates) formerKnown(c *Core) bool {
	if h.formerSet {
		return h.former
	}
	h.formerSet = true
	hc := &c.held
	if hc.ok && slices.Equal(hc.reps, h.reps) {
		h.former = hc.former
		return h.former
	}
	defer func() {
		*hc = heldCache{ok: true, reps: h.reps, former: h.former, pops: map[identity.PoPID]bool{}}
		for _, r := range h.reps {
			if r.IsPoP() {
				hc.pops[r.PoPID] = true
			}
		}
	}()
	for _, r := range h.reps {
		if !r.IsPoP() {
			continue
		}
		cur := c.currentEpoch(r.PoPID)
		if r.IsRegion() {
			cur = c.regionEpochOf(r.Region)
		}
		if cur != 0 && r.Incarnation != cur {
			h.former = true
			break
		}
	}
	return h.former
}

// epochsOf calls fn with every epoch held of PoP (or region aggregate) id
// until fn returns true, and reports whether it did.
func (h *heldAggregates) epochsOf(id identity.PoPID, fn func(inc uint64) bool) bool {
	if h.byPoP == nil && h.lookups >= heldScan {
		h.byPoP = map[identity.PoPID][]uint64{}
		for _, r := range h.reps {
			if r.IsPoP() {
				h.byPoP[r.PoPID] = append(h.byPoP[r.PoPID], r.Incarnation)
			}
		}
	}
	if h.byPoP != nil {
		for _, inc := range h.byPoP[id] {
			if fn(inc) {
				return true
			}
		}
		return false
	}
	h.lookups++
	for _, r := range h.reps {
		if r.IsPoP() && r.PoPID == id && fn(r.Incarnation) {
			return true
		}
	}
	return false
}

// holdsFormer reports whether the node holds counts of an aggregate it
// would relay to PoP id (see former): when id asked, an earlier epoch of a
// PoP whose current epoch is known; always, an epoch of id other than the
// one it publishes under.
func (h *heldAggregates) holdsFormer(c *Core, id identity.PoPID, asked bool) bool {
	if asked && h.formerKnown(c) {
		return true
	}
	p := c.peers.get(id)
	if p == nil {
		return false
	}
	if h.epochsOf(id, func(inc uint64) bool { return inc != p.epoch }) {
		return true
	}
	cur := c.regionEpochOf(id.Region)
	// A former epoch of id's region.
	return cur != 0 && h.epochsOf(identity.PoPID{Region: id.Region, PoP: identity.RegionPoP}, func(inc uint64) bool { return inc != cur })
}

// former reports whether aggregate r is relayed to PoP id: an earlier epoch
// of id itself, and, when id asked for a sync, an earlier epoch of any PoP
// (this one included) whose current epoch is known. Nobody else re-sends
// those: live nodes re-send only their current epoch's totals, so a node
// that restarts alone in its PoP would not count them until their windows
// pass.
func (c *Core) former(r identity.Replica, id identity.PoPID, asked bool) bool {
	if r.IsRegion() {
		// A region's aggregate: an earlier region epoch goes to the PoPs
		// of its region (a region whose nodes all restarted), and to any
		// PoP that asked (region.go).
		cur := c.regionEpochOf(r.Region)
		return cur != 0 && r.Incarnation != cur && (asked || r.Region == id.Region)
	}
	of := r.PoPID
	if c.regionVoices() && of.Region != id.Region {
		return false // counted there in of's region total (region.go)
	}
	if of == id {
		p := c.peers.get(id)
		return p != nil && r.Incarnation != p.epoch
	}
	if !asked {
		return false
	}
	cur := c.currentEpoch(of)
	return cur != 0 && r.Incarnation != cur
}

// currentEpoch returns the epoch PoP id publishes under as this node knows
// it, or 0 when it does not know it (which no aggregate carries).
func (c *Core) currentEpoch(id identity.PoPID) uint64 {
	if id == c.selfPoP {
		return c.epoch
	}
	if p := c.peers.get(id); p != nil && p.epoch != 0 {
		return p.epoch
	}
	return 0
}

// setPeerEpoch records e as remote PoP p's current epoch.
func (c *Core) setPeerEpoch(p *peer, e uint64) {
	if p.epoch != e {
		p.epoch = e
		c.held.changed(p.id)
	}
}

// heldCache is what heldAggregates.formerKnown last found, and what it was
// found of: the same replicas held and the same epochs known of their PoPs
// give the same answer, without a look-up of every PoP's epoch. At a cold
// start every PoP asks for a sync, and each relay to one looked every PoP
// held up. A change of the epoch of a PoP held, or of the own PoP's or
// region's, drops it (changed); a PoP added has no epoch yet, as when it
// was not known, and one deleted drops it (checkPeers).
type heldCache struct {
	ok     bool
	reps   []identity.Replica
	pops   map[identity.PoPID]bool // the PoPs (and regions) of reps
	former bool
}

// changed drops the cache when it holds counts of PoP (or region
// aggregate) id, whose epoch changed.
func (h *heldCache) changed(id identity.PoPID) {
	if h.ok && h.pops[id] {
		h.ok = false
	}
}
