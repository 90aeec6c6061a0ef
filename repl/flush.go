package repl

import (
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/window"
	"github.com/geolimit/geolimit/wire"
)

// Flushing: the members of a PoP flush together in slots aligned to the
// clock; each sends its own changed counts to the others and its owned
// totals to the slot's speaker, which publishes the PoP's totals as one
// message a little later.

// phase spreads a node's timers over an interval, the same way at every run.
func (c *Core) phase(every int64) int64 {
	if every <= 0 {
		return 0
	}
	return int64(mix64(hashString(c.self.String())^c.cfg.PhaseSeed) % uint64(every))
}

// slotPhase is where in the flush interval the PoP's flush slots start: the
// same for every member.
func (c *Core) slotPhase() int64 {
	fl := int64(c.cfg.FlushInterval)
	return int64(mix64(hashString(c.selfPoP.String())^c.cfg.PhaseSeed) % uint64(fl))
}

// slotOf returns the flush slot of time t (the node's clock).
func (c *Core) slotOf(t int64) int64 {
	fl := int64(c.cfg.FlushInterval)
	x := t - c.slotPhase()
	if x < 0 {
		return (x - fl + 1) / fl
	}
	return x / fl
}

// speaker reports whether this member speaks for the PoP in slot: members
// take turns in name order, as for heartbeats.
func (c *Core) speaker(slot int64) bool {
	n := int64(len(c.members))
	if n <= 1 {
		return true
	}
	return ((slot%n)+n)%n == int64(c.rank)
}

// Flush sends the counts changed since the last flush: own counts to the
// PoP's members, and the PoP totals of owned keys to the other PoPs.
func (c *Core) Flush(now int64) {
	c.speak(now) // and what this node gathered as a slot's speaker
	c.stats.Flushes++
	b := c.node.FlushTo(now, c.ownsKey, c.hasMembers())
	c.emitBatch(&b, false, true)
	c.flushRegion(now, false) // region.go
}

// flushSlot is the flush of a slot: own counts go to the PoP's members; the
// totals of owned keys go to the slot's speaker (this node, or the others
// over the PoP link), which publishes the PoP's totals as one message, so a
// PoP sends one message per flush interval whatever its size.
func (c *Core) flushSlot(now int64) {
	c.stats.Flushes++
	b := c.node.FlushTo(now, c.ownsKey, c.hasMembers())
	c.emitBatch(&b, false, false)
	if !c.cfg.GlobalLink || c.epoch == 0 {
		return
	}
	slot := c.slotOf(now)
	if !c.cfg.PoPLink || len(c.members) <= 1 {
		c.emitBatch(&replicated.Batch{PoP: b.PoP}, false, true)
		c.flushRegion(now, false) // region.go
		return
	}
	if c.speaker(slot) {
		if c.speakAt == 0 || c.speakSlot != slot {
			c.speak(now) // anything left of an earlier slot
			c.speakAt, c.speakSlot = now+int64(c.cfg.SpeakDelay), slot
		}
		c.speech = append(c.speech, b.PoP.Entries...)
		c.speechBlk = append(c.speechBlk, blocks.Section.Items(&b.PoP)...)
		c.flushRegion(now, true)
		return
	}
	if hasContent(&b.PoP) {
		d := b.PoP
		c.stats.Forwards++
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Delta: &d})
	}
	c.flushRegion(now, false)
}

// speak publishes the totals gathered for the current slot.
func (c *Core) speak(now int64) {
	if c.speakAt != 0 {
		c.spoken = max(c.spoken, c.speakSlot)
	}
	if (len(c.speech) > 0 || len(c.speechBlk) > 0) && c.epoch != 0 {
		d := wire.Delta{Sender: identity.PoPReplica(c.self.PoPID, c.epoch), SentAt: now, Epoch: c.epoch, Entries: c.speech}
		blocks.Section.Set(&d, c.speechBlk)
		c.publish(&d, false)
	}
	c.speakRegion(now) // region.go
	c.speech, c.speechBlk, c.speakAt = nil, nil, 0
}

// forwarded takes a member's totals for a flush slot: the slot's speaker
// gathers them, or publishes them at once when the slot's message went out
// already; the other members ignore them.
func (c *Core) forwarded(now int64, d *wire.Delta) bool {
	if !c.cfg.GlobalLink || c.cfg.FlushInterval <= 0 || !hasContent(d) {
		return true
	}
	// The slot is the sender's, so every member judges the same forward the
	// same way whatever its own clock.
	slot, cur := c.slotOf(d.SentAt), c.slotOf(now)
	if span := int64(c.node.MaxSkew()/c.cfg.FlushInterval) + 1; slot < cur-span || slot > cur+span {
		return false // further off than a member's clock may be: dropped
	}
	if !c.speaker(slot) {
		return true
	}
	entries := c.validTotals(now, d.Entries)
	blks := c.validBlocks(blocks.Section.Items(d))
	if len(entries) == 0 && len(blks) == 0 {
		return true
	}
	switch {
	case c.speakAt != 0 && c.speakSlot == slot:
		c.speech = append(c.speech, entries...)
		c.speechBlk = append(c.speechBlk, blks...)
		return true
	case slot >= cur-1 && slot <= cur+1 && slot > c.spoken && (c.speakAt == 0 || slot > c.speakSlot):
		// Before this node's own flush of the slot: gather from now.
		c.speak(now)
		c.speakAt, c.speakSlot = now+int64(c.cfg.SpeakDelay), slot
		c.speech = append(c.speech, entries...)
		c.speechBlk = append(c.speechBlk, blks...)
		return true
	}
	// Late, or from a member whose clock is off: on its own.
	late := wire.Delta{Sender: d.Sender, SentAt: now, Epoch: c.epoch, Entries: entries}
	blocks.Section.Set(&late, blks)
	c.publish(&late, false)
	return true
}

// validTotals returns a copy of the forwarded entries this node may publish
// for its PoP: global rules it knows, windows live at a time within the
// node's max skew of now (a member's clock may be off by that much), keys of
// legal length.
func (c *Core) validTotals(now int64, es []crdt.Entry) []crdt.Entry {
	now += c.corr // windows are on the fleet clock (fleetclock.go)
	out := make([]crdt.Entry, 0, len(es))
	for _, e := range es {
		r, ok := c.node.WireRule(e.Rule)
		if !ok || r.Scope != replicated.ScopeGlobal || len(e.Key) == 0 || len(e.Key) > crdt.MaxKeyLen || e.Count == 0 {
			c.stats.ForwardsRefused++
			continue
		}
		skew := int64(c.node.MaxSkew())
		lo, _ := window.Split(now-skew, int64(r.Window))
		hi, _ := window.Split(now+skew, int64(r.Window))
		if e.Window < lo-1 || e.Window > hi {
			c.stats.ForwardsRefused++
			continue
		}
		out = append(out, e)
	}
	return out
}

// validBlocks returns a copy of the forwarded penalty blocks this node may
// publish for its PoP: global rules it knows, keys of legal length. The
// receivers bound how long a block may last.
func (c *Core) validBlocks(bs []blocks.Block) []blocks.Block {
	var out []blocks.Block
	for _, b := range bs {
		r, ok := c.node.Rule(b.Rule)
		if !ok || r.Scope != replicated.ScopeGlobal || r.BlockFor == 0 || len(b.Key) == 0 || len(b.Key) > crdt.MaxKeyLen {
			c.stats.ForwardsRefused++
			continue
		}
		out = append(out, b)
	}
	return out
}

// hasContent reports whether d carries counts or items of the node's
// replicated features.
func hasContent(d *wire.Delta) bool {
	return len(d.Entries) > 0 || sectionItems(d) > 0
}

// sectionItems returns how many items d carries beyond its counts, rules'
// modes left out: they travel in messages of their own (modes.go).
func sectionItems(d *wire.Delta) int { return d.Sections() - modes.Section.Len(d) }

// hasMembers reports whether the PoP has other members to tell.
func (c *Core) hasMembers() bool { return c.cfg.PoPLink && len(c.members) > 1 }

// emitBatch queues a batch: Local to the PoP (when there are members), PoP
// totals to the other PoPs when global is set.
func (c *Core) emitBatch(b *replicated.Batch, reliable, global bool) {
	if c.cfg.PoPLink && len(c.members) > 1 && hasContent(&b.Local) {
		d := b.Local
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Reliable: reliable, Delta: &d})
	}
	if global && c.cfg.GlobalLink && hasContent(&b.PoP) {
		d := b.PoP
		c.publish(&d, reliable)
	}
}

// publish queues the PoP's totals d to the other PoPs. With region voices
// they reach only the PoPs of the region, and the penalty blocks among
// them go on the region link too, to every PoP (region.go).
func (c *Core) publish(d *wire.Delta, reliable bool) {
	c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindDelta, Reliable: reliable, Delta: d})
	if bs := blocks.Section.Items(d); c.regionVoices() && len(bs) > 0 {
		bd := wire.Delta{Sender: d.Sender, SentAt: d.SentAt, Epoch: d.Epoch}
		blocks.Section.Set(&bd, bs)
		c.out = append(c.out, Message{Link: LinkRegion, Kind: KindDelta, Reliable: reliable, Delta: &bd})
	}
}
