package repl

import (
	"math"
	"time"

	"github.com/geolimit/geolimit/replicated"
)

// The near-limit allowance (pop.Link.SetAllowance) needs two figures only
// the replication layer knows: how many nodes may admit a key, and how long
// after a flush the others hold the counts it sent. The Core measures the
// second from what arrives: a message's age at arrival (the receiver's clock
// minus its SentAt), per remote PoP and for the own PoP's members, as a
// maximum that decays by a sixteenth of the difference per sample, so that
// jitter is covered and a path that got faster is followed within a few
// dozen messages. A sample is clamped to [0, PeerTimeout]: a sender whose
// clock runs ahead gives negative ages, and a skewed clock cannot make the
// horizon longer than the time after which the PoP would count as
// partitioned.
//
//	horizon(pop)    = the members' latency
//	horizon(global) = the latency to the farthest PoP heard, plus, with
//	                  members, one flush interval and the speaker's delay
//	                  (a member's count reaches the other PoPs in the PoP
//	                  total its owner publishes at the next slot)
//
// Members are the live members; PoPs, for global rules, the PoPs that
// count: this one, every PoP heard and not partitioned, and, until the first
// check of the peers, the expected PoPs not heard yet (at a cold start they
// admit too). Before any sample a remote PoP's latency is taken to be the
// heartbeat interval.

// delayDecay is the divisor of the decay of a measured latency per sample.
const delayDecay = 16

// lagTracker is a decaying maximum of message ages.
type lagTracker struct {
	max int64
	set bool
}

func (l *lagTracker) sample(age int64) bool {
	switch {
	case !l.set:
		l.max, l.set = age, true
		return true
	case age >= l.max:
		raised := age > l.max
		l.max = age
		return raised
	}
	l.max -= (l.max - age) / delayDecay
	return false
}

// observe records the age of a message sent at sentAt (the sender's clock)
// that arrived at now; p is its PoP (nil: a member).
func (c *Core) observe(now, sentAt int64, p *peer) {
	if sentAt == 0 {
		return
	}
	age := min(max(c.messageAge(now, sentAt, p), 0), int64(c.cfg.PeerTimeout))
	var raised bool
	if p == nil {
		raised = c.popLag.sample(age)
	} else {
		old := c.lagOf(p)
		raised = p.lag.sample(age)
		c.remote.sampled(old, c.lagOf(p))
	}
	if raised {
		c.allowDirty = true
	}
}

// updateAllowance tells the node the allowance of each scope when it
// changed, recomputing it when asked or when a sample raised a latency.
func (c *Core) updateAllowance(now int64, force bool) {
	if !c.cfg.Allowance() || (!force && !c.allowDirty) {
		return
	}
	c.allowDirty = false
	members := 1
	if c.cfg.PoPLink {
		members = len(c.members)
	}
	popH := c.popLag.max
	if !c.popLag.set {
		popH = 0
	}
	pa := replicated.Allowance{Horizon: time.Duration(popH), Members: members, PoPs: 1}
	ga := replicated.Allowance{Horizon: pa.Horizon, Members: members, PoPs: 1}
	if c.cfg.GlobalLink {
		r := c.remoteView(now, force)
		ga.PoPs = 1 + r.pops
		if far := r.far; r.pops > 0 {
			h := far
			if members > 1 {
				h += int64(c.cfg.FlushInterval) + int64(c.cfg.SpeakDelay)
				if c.cfg.FlushInterval == 0 {
					h += popH
				}
			}
			if c.regionVoices() && !c.region.voice {
				// To the other regions through the region's voice: its
				// flush slot and speaker (region.go), which a PoP whose
				// slots are aligned to the voice's reaches a part of the
				// flush interval ahead.
				wait := int64(c.cfg.FlushInterval)
				if c.region.aligned {
					wait /= voiceLead
				}
				h += wait + int64(c.cfg.SpeakDelay)
			}
			ga.Horizon = time.Duration(max(h, popH))
		}
	}
	if pa != c.allow[0] {
		c.allow[0] = pa
		c.node.SetAllowance(replicated.ScopePoP, pa)
	}
	if ga != c.allow[1] {
		c.allow[1] = ga
		c.node.SetAllowance(replicated.ScopeGlobal, ga)
	}
}

// Allowance returns the near-limit allowance the Core last told the node,
// for pop-scope and for global rules.
func (c *Core) Allowance() (popScope, global replicated.Allowance) { return c.allow[0], c.allow[1] }

// remotePoPs is what updateAllowance last found of the remote PoPs that
// count: how many, the largest latency among them and how many have it. A
// message that raises one PoP's latency then costs O(1) rather than a walk
// over every PoP. It stays exact while ok and now is in [at, until]: until
// is the earliest time a counted PoP turns silent, heard invalidates it
// when a PoP that did not count is heard, and a sample that lowers the
// largest latency of the last PoP that had it invalidates it.
type remotePoPs struct {
	ok        bool
	at, until int64
	part      uint64 // the partVersion it was computed under
	pops      int
	far       int64
	atFar     int // counted PoPs whose latency is far
}

// sampled updates the view after a counted PoP's latency went from old to
// lag.
func (r *remotePoPs) sampled(old, lag int64) {
	switch {
	case !r.ok || lag == old:
	case lag > r.far:
		r.far, r.atFar = lag, 1
	case lag == r.far:
		r.atFar++
	case old == r.far:
		if r.atFar--; r.atFar == 0 {
			r.ok = false
		}
	}
}

// lagOf returns remote PoP p's latency: as measured, or before any sample
// a heartbeat interval.
func (c *Core) lagOf(p *peer) int64 {
	if p.lag.set {
		return p.lag.max
	}
	return int64(c.cfg.HeartbeatInterval)
}

// remoteView returns the remote PoPs that count at now, recomputed when
// forced or when the cached view may be stale.
func (c *Core) remoteView(now int64, force bool) remotePoPs {
	r := &c.remote
	if !force && r.ok && now >= r.at && now <= r.until && r.part == c.partVersion {
		return *r
	}
	*r = remotePoPs{ok: true, at: now, until: math.MaxInt64, part: c.partVersion}
	for _, p := range c.peers.m {
		if p.heardOnce && c.silent(p, now) {
			continue // partitioned: its counts are frozen, it hears nothing of ours
		}
		if !p.heardOnce && (!p.expected || c.partVersion > 0) {
			continue // never heard: counted only until the first check of the peers
		}
		if p.heardOnce {
			r.until = min(r.until, p.lastHeard+int64(c.cfg.PeerTimeout))
		}
		r.pops++
		switch lag := c.lagOf(p); {
		case lag > r.far:
			r.far, r.atFar = lag, 1
		case lag == r.far:
			r.atFar++
		}
	}
	return *r
}
