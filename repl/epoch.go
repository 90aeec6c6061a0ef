package repl

// The PoP epoch: who starts it, how members learn it, what changes with it.

// setEpoch installs a PoP epoch: totals are published under it from now on,
// re-sent at once, and former epochs' totals are asked back from the others.
func (c *Core) setEpoch(now int64, e uint64) {
	if e == c.epoch {
		return
	}
	if c.epoch != 0 {
		c.stats.EpochChanges++
	}
	c.epoch = e
	c.held.ok = false // relay.go
	c.node.SetEpoch(e)
	c.want |= wantGlobalAE | wantAnnounce
	c.askSync(now)
}

// maybeStartEpoch starts an epoch of this node's own when it has none and
// is alone in its PoP, or is the first member by name and has waited
// EpochWait to learn the PoP's (at once when the PoP starts together,
// Config.ColdStart). The other members never start one: they learn it from
// the first member, or from any member that has one (a member announces its
// epoch to a newcomer at once, and a joiner usually learns it from the
// join's push/pull state before its first tick), and take over when the
// membership changes. When two epochs meet anyway, the lowest wins.
func (c *Core) maybeStartEpoch(now int64) {
	if c.epoch != 0 || !c.started {
		return
	}
	alone := c.membersKnown && len(c.members) == 1
	waited := now-c.startedAt >= int64(c.cfg.EpochWait)
	if alone || (c.rank == 0 && (waited || (c.cfg.ColdStart && c.membersKnown))) {
		c.setEpoch(now, c.self.Incarnation)
	}
}

// learnEpoch takes the epoch a member announced: the lowest known epoch
// wins, so a member that started its own epoch before it heard the others
// joins theirs, and the PoP keeps one epoch while any member lives.
func (c *Core) learnEpoch(now int64, e uint64) {
	if e != 0 && (c.epoch == 0 || e < c.epoch) {
		c.setEpoch(now, e)
	}
}
