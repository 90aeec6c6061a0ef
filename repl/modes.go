package repl

import (
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// Rules' modes set at run time (the kill switch, pop/modes.go): a mode set
// on a node goes at its next Tick to every member of its PoP and to every
// other PoP, in a message of its own (a modes section), not with the next
// flush; every anti-entropy round, re-send and memberlist state exchange
// carries every mode the node holds, so a node that missed one, restarted
// without a state file or joined later learns it. Modes are a
// last-writer-wins register per rule name, so any node may send any it
// holds. A mode message from inside the PoP must name a member; one
// between PoPs must come through its sender's PoP's subject, as counts do.

// sendModes queues ms for the PoP's members (toPoP) and the other PoPs
// (global).
func (c *Core) sendModes(now int64, ms []modes.RuleMode, toPoP, global, reliable bool) {
	if len(ms) == 0 {
		return
	}
	if toPoP && c.hasMembers() {
		d := wire.Delta{Sender: c.self, SentAt: now, Epoch: c.epoch}
		modes.Section.Set(&d, ms)
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Reliable: reliable, Delta: &d})
		c.stats.ModesSent += uint64(len(ms))
	}
	if global && c.cfg.GlobalLink {
		d := wire.Delta{Sender: c.self, SentAt: now, Epoch: c.epoch}
		modes.Section.Set(&d, ms)
		link := LinkGlobal
		if c.regionVoices() {
			link = LinkRegion // every PoP hears it; a PoP total only its region (region.go)
		}
		c.out = append(c.out, Message{Link: link, Kind: KindDelta, Reliable: reliable, Delta: &d})
		c.stats.ModesSent += uint64(len(ms))
	}
}

// sendTakenModes sends at once the modes set on this node since the last
// call.
func (c *Core) sendTakenModes(now int64) {
	c.sendModes(now, c.node.TakeModes(), true, true, false)
}

// stepModes merges the modes of a received message, unless its sender may
// not speak through the link it came by (it returns false then).
func (c *Core) stepModes(now int64, m Message) bool {
	d := m.Delta
	switch {
	case m.Link == LinkPoP:
		if !d.Sender.SamePoP(c.self) || d.Sender.IsPoP() {
			return false
		}
	case m.Kind != KindDelta || m.From == c.selfPoP || d.Sender.PoPID != m.From:
		return false
	}
	ms := modes.Section.Items(d)
	c.stats.ModesReceived += uint64(len(ms))
	c.node.MergeModes(now, modes.Source{PoP: m.From, Member: m.Link == LinkPoP}, ms)
	return true
}
