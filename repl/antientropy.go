package repl

// Anti-entropy: every AntiEntropyInterval each node re-sends its live
// counts, a large store's round in parts paced over half the interval.

// startAE starts a periodic anti-entropy round: at once for a small store,
// else in parts over the first half of the interval (paceAE). What is left
// of the round before is sent first.
func (c *Core) startAE(now int64) {
	for c.aePart < c.aeParts {
		c.sendAEPart(now)
	}
	parts := c.node.AntiEntropyParts()
	if parts <= 1 {
		c.aeParts, c.aePart = 0, 0
		c.want |= wantLocalAE | wantGlobalAE
		return
	}
	c.stats.AntiEntropies++
	c.aeParts, c.aePart, c.aeStart = parts, 0, now
	c.sendModes(now, c.node.Modes(), true, true, true)
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
	b := c.node.AntiEntropyPart(now, c.ownsKey, c.aePart, c.aeParts)
	c.regionAE(now, c.aePart, c.aeParts) // region.go
	c.aePart++
	c.emitBatch(&b, true, true)
}

// Resync asks for every live count to be re-sent now.
func (c *Core) Resync(now int64) {
	c.want |= wantLocalAE | wantGlobalAE
	c.doWork(now)
}
