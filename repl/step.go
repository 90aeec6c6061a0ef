package repl

import (
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/modes"
)

// StepResult says what Step did with a message, for metrics.
type StepResult struct {
	// Forged: the sender does not belong to the PoP the message came from;
	// nothing of it was used.
	Forged bool
	// Dropped: relayed state that arrived before the PoP epoch was known;
	// it is asked for again once it is.
	Dropped bool
	// Applied is what the node core did with the entries.
	Applied replicated.ApplyStats
}

// Step handles one received message at now.
func (c *Core) Step(now int64, m Message) StepResult {
	var res StepResult
	d := m.Delta
	if d == nil {
		return res
	}
	if modes.Section.Len(d) > 0 {
		// Rules' modes travel in messages of their own (modes.go).
		if !c.stepModes(now, m) {
			res.Forged = true
			c.stats.Forged++
			return res
		}
		if !hasContent(d) {
			return res
		}
	}
	if m.Link == LinkPoP && d.Sender.SamePoP(c.self) {
		c.observe(now, d.SentAt, nil)
	}
	switch {
	case m.Link == LinkRegion:
		c.stepRegion(now, m, &res) // region.go
	case m.Link == LinkPoP:
		c.stepPoP(now, m, &res)
	case m.Kind == KindState:
		c.stepState(now, m, &res)
	default:
		c.stepGlobal(now, m, &res)
	}
	if res.Forged {
		c.stats.Forged++
	}
	c.updateAllowance(now, false)
	c.doWork(now)
	return res
}

// stepPoP handles a message from a member of the own PoP (memberlist):
// a member's region totals or PoP totals for the slot's speaker to pass
// on, or its own counts and announcements.
func (c *Core) stepPoP(now int64, m Message, res *StepResult) {
	d := m.Delta
	switch {
	case d.Sender.IsRegion() && d.Sender.Region == c.selfPoP.Region:
		// A member's region totals for the slot's speaker.
		if !c.forwardedRegion(now, d) {
			res.Dropped = true
			c.stats.ForwardsDropped++
		}
	case d.Sender.IsPoP() && d.Sender.SamePoP(c.self):
		// A member's totals for the slot's speaker.
		if c.epoch == 0 || d.Sender.Incarnation != c.epoch || !c.forwarded(now, d) {
			res.Dropped = true
			c.stats.ForwardsDropped++
		}
	default:
		if !d.Sender.SamePoP(c.self) || d.Sender.IsPoP() {
			res.Forged = true
			break
		}
		if d.Epoch == 0 && c.epoch != 0 {
			c.want |= wantAnnounce // a member that does not know it yet
		}
		if !hasContent(d) && d.Epoch != 0 {
			// An announcement: the sender's view of the PoP changed.
			c.scheduleResend(now)
		}
		c.learnEpoch(now, d.Epoch)
		if hasContent(d) {
			res.Applied = c.node.ApplyFrom(now, d, replicated.ScopePoP, nil)
			if c.cfg.FlushInterval == 0 {
				c.Flush(now)
			}
		}
	}
}

// stepState handles former totals another PoP (m.From) relays: this
// PoP's, or, asked for a sync, any PoP's; the transport delivers only state
// meant for this PoP.
func (c *Core) stepState(now int64, m Message, res *StepResult) {
	d := m.Delta
	if m.From == c.selfPoP || !d.Sender.IsPoP() {
		res.Forged = true
		return
	}
	if !hasContent(d) {
		c.marked(m.From, d) // a marker: m.From's answer is complete
		return
	}
	if d.Sender.IsRegion() {
		c.stateRegion(now, m, res) // region.go
		return
	}
	if c.otherRegion(d.Sender) {
		res.Dropped = true // counted in its region's total (region.go)
		c.stats.StateDropped++
		return
	}
	if !d.Sender.SamePoP(c.self) {
		// Another PoP's former epoch: never its current one (its own
		// messages carry those), and only of PoPs this node knows.
		p := c.peers.get(d.Sender.PoPID)
		switch {
		case d.Sender.PoPID == m.From && d.Epoch == d.Sender.Incarnation:
			res.Forged = true // no PoP relays its current epoch
		case p != nil && p.epoch == d.Sender.Incarnation && d.Sender.PoPID == m.From:
			// The PoP relays, from a later epoch (d.Epoch), the one this
			// node still holds for its current one: it restarted, and its
			// answer came before its messages under the new epoch. Its
			// counts of that epoch are held already.
			res.Dropped = true
			c.stats.StateDropped++
		case p != nil && p.epoch == d.Sender.Incarnation:
			res.Forged = true // no PoP relays another's current epoch
		case p == nil || p.epoch == 0:
			res.Dropped = true
			c.stats.StateDropped++
		default:
			res.Applied = c.node.ApplyFrom(now, d, replicated.ScopeGlobal, nil)
		}
		return
	}
	if c.epoch == 0 {
		// Which epoch is the current one is not known yet: its totals
		// must not be counted on top of the members' own counts.
		res.Dropped = true
		c.stats.StateDropped++
		return
	}
	res.Applied = c.node.ApplyFrom(now, d, replicated.ScopeGlobal, nil)
}

// stepGlobal handles a message from another PoP on its own subject
// (NATS): a heartbeat, a sync request or its totals.
func (c *Core) stepGlobal(now int64, m Message, res *StepResult) {
	d := m.Delta
	if m.From == c.selfPoP || d.Sender.PoPID != m.From {
		res.Forged = true
		return
	}
	if m.Kind == KindDelta {
		c.node.PrefetchDelta(d) // comes in while the sender is looked up
	}
	if left, ok := goodbyeOf(d); ok && m.Kind == KindHeartbeat {
		c.stepGoodbye(now, m, d, left) // goodbye.go
		return
	}
	p := c.heardFrom(m.From, now, d.SentAt) // goodbye.go
	if p == nil {
		return
	}
	c.observe(now, d.SentAt, p)
	if d.Epoch != 0 && m.Kind != KindDelta {
		c.epochHeard(p, d.Epoch)   // crash.go
		c.setPeerEpoch(p, d.Epoch) // the sender's current epoch
	}
	switch m.Kind {
	case KindHeartbeat:
		c.stepMates(now, p, m.From, d) // mates.go
		c.checkDrift(now, p, d)
		c.takeRegionEpoch(now, m.From, d) // region.go
		if c.missedBeats(p, d.SentAt) {
			// A short cut (under PeerTimeout) lost messages: repair now
			// rather than at the next anti-entropy round.
			c.askSyncOf(now, m.From, false) // sync.go: what it sends, only

		}
	case KindSync:
		c.takeRegionEpoch(now, m.From, d) // region.go: before relaying
		what, scoped := c.syncAsks(d)     // sync.go
		what = c.regionAnswer(m.From, what)
		if what == 0 && scoped {
			break // it asks other PoPs
		}
		if wantsMarker(d) {
			c.markTo[m.From] = true
		}
		if what == 0 {
			// Asked of every PoP, and this one has nothing to re-send
			// that reaches the asker (sync.go): its relay and marker
			// still answer.
			c.relayTo[m.From] = true
			break
		}
		// Every member re-sends the totals it owns, so the PoP answers
		// once. A re-send already due answers every request that came
		// before it; otherwise one is scheduled, no sooner than
		// SyncInterval after the one that answered the same PoP last.
		last := p.lastAnswer(d.Sender, now, int64(c.cfg.SyncInterval))
		if c.resendAt != 0 && c.resendAt >= last {
			c.stats.SyncAnswers++
			p.answered[d.Sender] = c.resendAt
			c.resendWhat |= what
			c.relayFor(m.From, scoped)
			break
		}
		at := now + c.coalesce()
		if last != 0 && at < last+int64(c.cfg.SyncInterval) {
			at = last + int64(c.cfg.SyncInterval)
			c.stats.SyncThrottled++
		} else {
			c.stats.SyncAnswers++
		}
		p.answered[d.Sender] = c.remoteResendAt(at)
		c.resendWhat |= what
		c.relayFor(m.From, scoped)
	case KindDelta:
		if d.Sender.IsPoP() {
			c.epochHeard(p, d.Sender.Incarnation) // crash.go
			c.setPeerEpoch(p, d.Sender.Incarnation)
		}
		if hasContent(d) && c.otherRegion(d.Sender) {
			res.Dropped = true // counted in its region's total (region.go)
			break
		}
		if hasContent(d) {
			res.Applied = c.node.ApplyFrom(now, d, replicated.ScopeGlobal, &p.sender)
			if res.Applied.Merged+res.Applied.Unchanged > 0 {
				p.counted = true
			}
		}
	}
}
