package repl

import (
	"slices"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// The fleet clock. A node decides in the window of the time it is given; a
// region whose clocks run ahead of another's counts into a window the other
// has not reached (and beyond the node's MaxSkew its counts are ignored
// there until it has), so each side misses part of the other's counts and
// the fleet admits more than the limit. The offsets of the remote PoPs are
// measured already (drift.go); the node agrees on a fleet clock from them:
// its correction is the median of the offsets (a PoP's clock minus this
// node's) of every PoP it has heard heartbeats of, its own PoP counting 0,
// so that its clock plus the correction is the fleet's median clock; the
// node core decides and
// replicates windows on its own clock plus that correction. Every node that
// hears the same PoPs agrees on the same median clock, up to the error of
// the estimates (each errs low by about a one-way latency).
//
// Only the node core's time is corrected: the Core keeps the runtime's clock
// for its own timers, its liveness and the offsets it measures (every
// message it sends carries that clock in SentAt, the node core's batches
// too), so a change of the correction moves no timer and feeds nothing back
// into the measurement. The Core applies the
// correction to every time it hands its Node (fleetNode, below); the
// runtime applies ClockCorrection where it hands the node core time itself
// (decisions, the node's Tick): gossip.Options.FleetClock in the daemon,
// the simulator's node time.
//
// A PoP whose offset is estimated keeps counting after it falls silent (a
// cut does not change the clocks), until the Core forgets it.

// The offsets each side estimates err low by the one-way latency, both
// ways: a node behind the median clock would decide that latency behind the
// others (at 80 ms between regions, enough to lose most near-limit requests
// to them). Heartbeats therefore carry, as control entries, the sender's
// estimate of each PoP's offset it has (Key offsetKey, Rule the PoP's
// "region/pop", Window the offset in nanoseconds); a receiver takes the one
// of its own PoP, and the PoP's offset is then (its estimate minus the
// PoP's estimate of it) / 2, exact when the latency is the same both ways.
// A PoP of an older version sends none: its estimate alone is used.

// offsetKey marks a heartbeat's offset entries.
const offsetKey = "clockoffset/1"

// minCorrection: a median offset smaller than this is not corrected. The
// estimates err by up to a one-way latency (tens of milliseconds between
// regions), so a fleet of agreeing clocks would otherwise shift every
// node's time by a latency; skews this small cost a few percent of a 1 s
// window at most.
const minCorrection = int64(250 * time.Millisecond)

// correctionStep: the correction changes only when the median moves by more
// than this, so that the jitter of the estimates does not move the node's
// time back and forth.
const correctionStep = int64(20 * time.Millisecond)

// maxCorrection bounds the correction: a fleet whose clocks disagree by
// more has a clock to fix, not a median to follow.
const maxCorrection = int64(10 * time.Minute)

// popSkew is how far ahead of a node's fleet clock another PoP's may run:
// the fleet clock leaves a PoP up to minCorrection off, and its estimate
// errs by up to a one-way latency, which the offsets carried back take
// out. An entry of another PoP for a window that starts further ahead was
// counted before its sender's correction stepped its clock back (at a
// start, before the first heartbeats): its sender moved those counts back
// to the window they belong to (crdt's rebase), and, kept, they stood in
// the window ahead as counts of nobody's until the sender's new ones there
// passed them. With 1 s windows and two PoPs 1 s apart, every node refused
// the first part of the second window that way and spent the room at its
// end, which the sliding estimate of the third weighs as spread evenly:
// 1.24 of the limit (skewed-two-pops-1s), 1.12 without them.
const popSkew = 2 * minCorrection

// boundPoPSkew tells the node core how far ahead another PoP's clock may
// run (popSkew), when it takes a bound below its MaxSkew.
func boundPoPSkew(n Node) {
	if b, ok := n.(interface{ SetPoPSkew(time.Duration) }); ok {
		b.SetPoPSkew(time.Duration(popSkew))
	}
}

// ClockCorrection returns what this node adds to its clock to decide on the
// fleet clock (0 when the fleet agrees within minCorrection). The runtime
// adds it to the time it hands the node core directly; the Core adds it to
// the time it hands its Node.
func (c *Core) ClockCorrection() time.Duration { return time.Duration(c.corr) }

// correctionMoved reports whether a heartbeat of p may move the correction:
// p's offset moved by a quarter of correctionStep or more since the
// correction was last computed, p is new to it, or the start is under way
// (expected PoPs unheard). Recomputing it sorts every PoP's offset: at each
// of P PoPs' heartbeats, that was a node's largest cost in a fleet of
// hundreds of PoPs.
func (c *Core) correctionMoved(now int64, p *peer) bool {
	o := p.drift.fleetOffset()
	if p.drift.usedSet && abs(o-p.drift.used) < correctionStep/4 && !c.corrHeld {
		return false
	}
	return true
}

// updateCorrection recomputes the correction from the PoPs' offsets at now.
//
// At a start the PoPs are heard one by one, and the median of the first
// few heard can be any of them (a node of fra that has heard the two us
// PoPs 4s ahead but not ams yet would step 4s ahead). A node counts in the
// windows of the clock it decides on, and a key counted ahead stays there
// until that clock catches up (crdt's shard.rebase moves it back when the
// clock goes back more than a window, with what it counted): so while
// expected PoPs (Settings.ExpectedPoPs) are unheard, for at most a peer
// timeout after the start, the correction changes only when the median is
// the same, within correctionStep, wherever their clocks are.
func (c *Core) updateCorrection(now int64) {
	offs := append(c.corrScratch[:0], 0) // the own PoP
	for _, p := range c.clocked {
		p.drift.used, p.drift.usedSet = p.drift.fleetOffset(), true
		offs = append(offs, p.drift.used)
	}
	unheard := c.expectedPoPs - c.clockedExpected
	c.corrScratch = offs
	slices.Sort(offs)
	if now-c.startedAt > int64(c.cfg.PeerTimeout) {
		unheard = 0 // silent: left out, as a PoP that fell silent is not
	}
	c.corrHeld = unheard > 0
	// The lower median of the offsets and the unheard ones: offs[m-unheard]
	// with them all behind, offs[m] with them all ahead.
	m := (len(offs) + unheard - 1) / 2
	if m-unheard < 0 || m >= len(offs) || offs[m]-offs[m-unheard] > correctionStep {
		return
	}
	corr := offs[m]
	if abs(corr) < minCorrection {
		corr = 0
	}
	corr = min(max(corr, -maxCorrection), maxCorrection)
	if abs(corr-c.corr) > correctionStep || (corr == 0) != (c.corr == 0) {
		c.clockStepped(now+c.corr, now+corr)
		c.corr = corr
	}
}

// clockStepped tells the node core that its clock steps from before to
// after (pop's Link.ClockStepped: a step forward carries the keys it
// counted in the window the clock leaves). A step back moves no key here:
// the node core moves one back at its first decision after it.
func (c *Core) clockStepped(before, after int64) {
	n := c.node
	if f, ok := n.(fleetNode); ok {
		n = f.Node
	}
	if s, ok := n.(interface{ ClockStepped(before, after int64) }); ok {
		s.ClockStepped(before, after)
	}
}

// messageAge returns the age of a message of p (nil: a member) sent at
// sentAt and received at now, as a latency (allowance.go). For a PoP whose
// clock is known to be off by minCorrection or more, the difference of the
// clocks is its offset, not a latency: the offset estimate is added back,
// which leaves the latency above the least one-way latency seen (the
// estimate errs low by that much) rather than zero on one side of the skew
// and PeerTimeout on the other.
func (c *Core) messageAge(now, sentAt int64, p *peer) int64 {
	age := now - sentAt
	if p != nil && p.drift.clockOff {
		age += p.drift.fleetOffset()
	}
	return age
}

// markClockOff records whether p's clock is known off by minCorrection or
// more. When it becomes known, the latencies measured before (the offset
// taken as a latency) are forgotten.
func (c *Core) markClockOff(p *peer) {
	off := abs(p.drift.fleetOffset()) >= minCorrection
	if off == p.drift.clockOff {
		return
	}
	p.drift.clockOff = off
	p.lag = lagTracker{}
	c.remote.ok = false
	c.allowDirty = true
}

// fleetOffset is the PoP's offset: the estimate corrected by the PoP's
// own estimate of this node's offset when it sent one.
func (dr *peerDrift) fleetOffset() int64 {
	o := dr.offset()
	if dr.hasBack {
		o = o/2 - dr.back/2
	}
	return o
}

// appendOffsets appends the heartbeat's offset entries: this node's
// estimate of the offset of every PoP whose clock is known off (only those
// correct anything: a fleet whose clocks agree sends none).
func (c *Core) appendOffsets(es []crdt.Entry) []crdt.Entry {
	for id, p := range c.peers.m {
		if p.drift.n > 0 && p.drift.clockOff {
			es = append(es, crdt.Entry{Rule: id.String(), Key: offsetKey, Window: p.drift.offset()})
		}
	}
	return es
}

// takeOffsets takes p's estimate of this node's offset from its heartbeat
// d, clamped like a SentAt.
func (c *Core) takeOffsets(p *peer, d *wire.Delta) {
	self := ""
	for _, e := range d.Entries {
		if e.Key != offsetKey {
			continue
		}
		if self == "" {
			self = c.selfPoP.String()
		}
		if e.Rule == self {
			p.drift.back, p.drift.hasBack = min(max(e.Window, -maxClockOffset), maxClockOffset), true
			return
		}
	}
}

// fleetNode is the Core's Node: it hands the node core every time on the
// fleet clock (the Core's time plus its correction).
type fleetNode struct {
	Node
	corr *int64
}

func (f fleetNode) FlushTo(now int64, owns func(key string) bool, local bool) replicated.Batch {
	return sentAt(f.Node.FlushTo(now+*f.corr, owns, local), now)
}

func (f fleetNode) AntiEntropyPart(now int64, owns func(key string) bool, part, parts int, changed bool) replicated.Batch {
	return sentAt(f.Node.AntiEntropyPart(now+*f.corr, owns, part, parts, changed), now)
}

// sentAt dates the batch's deltas at now, the Core's clock, as the Core
// dates its own messages: receivers take a message's age (net of the
// sender's offset), and a speaker the slot of a member's totals, from
// SentAt on that clock. Dated on the fleet clock, a corrected node's
// messages looked its correction old to the others (clamped to
// PeerTimeout: their near-limit split then counted it as slow), and its
// members' totals missed its speeches.
func sentAt(b replicated.Batch, now int64) replicated.Batch {
	b.Local.SentAt, b.PoP.SentAt = now, now
	return b
}

func (f fleetNode) State(now int64) []wire.Delta {
	st := f.Node.State(now + *f.corr)
	for i := range st {
		st[i].SentAt = now
	}
	return st
}

func (f fleetNode) ApplyFrom(now int64, d *wire.Delta, via replicated.Scope, from *crdt.InternCache) replicated.ApplyStats {
	return f.Node.ApplyFrom(now+*f.corr, d, via, from)
}

func (f fleetNode) SetUnheard(now int64, pops []string) { f.Node.SetUnheard(now+*f.corr, pops) }

func (f fleetNode) MergeModes(now int64, src modes.Source, ms []modes.RuleMode) {
	f.Node.MergeModes(now+*f.corr, src, ms)
}
