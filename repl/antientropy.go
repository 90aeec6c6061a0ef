package repl

// Anti-entropy: every AntiEntropyInterval each node re-sends the live
// counts and totals that settled (no change since the round before, some
// in the two rounds before that: crdt.Store.TotalsPart), a large store's
// round in parts paced over half the interval. A key's final total then
// goes out twice more after its own message; a lost message of a key that
// goes on changing is repaired by the key's next one (counts are
// absolute). What a node that missed more needs comes from a sync (a
// start, a PoP heard again, a gap in a PoP's heartbeats), which re-sends
// everything.

// startAE starts a periodic anti-entropy round: at once for a small store,
// else in parts over the first half of the interval (paceAE). What is left
// of the round before is sent first.
func (c *Core) startAE(now int64) {
	for c.aePart < c.aeParts {
		c.sendAEPart(now)
	}
	c.stats.AntiEntropies++
	c.aeParts, c.aePart, c.aeStart = max(c.node.AntiEntropyParts(), 1), 0, now
	c.sendModes(now, c.node.Modes(), true, true, true)
	c.paceAE(now) // the first part is due now
}

// aePartAt is when part k of the round under way is due.
func (c *Core) aePartAt(k int) int64 {
	return c.aeStart + int64(k)*(int64(c.cfg.AntiEntropyInterval)/2)/int64(c.aeParts)
}

// paceAE sends the parts of the round under way that are due at now.
func (c *Core) paceAE(now int64) {
	for c.aePart < c.aeParts && now >= c.aePartAt(c.aePart) {
		c.sendAEPart(now)
	}
}

// sendAEPart sends the next part of the round under way.
func (c *Core) sendAEPart(now int64) {
	b := c.node.AntiEntropyPart(now, c.ownsKey, c.aePart, c.aeParts, true)
	c.regionAE(now, c.aePart, c.aeParts, true) // region.go
	c.aePart++
	c.emitBatch(&b, true, true)
}

// Resync asks for every live count to be re-sent now.
func (c *Core) Resync(now int64) {
	c.want |= wantLocalAE | wantGlobalAE
	c.doWork(now)
}
