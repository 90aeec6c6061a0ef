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
//	                  total its owner publishes at the next slot), plus,
//	                  with region voices at a PoP not its region's
//	                  voice, another (the voice's slot)
//	reach           = the horizon of a node with members at a PoP not its
//	                  region's voice, when longer: a node with a shorter
//	                  path scales its share of the headroom by the two
//	                  (crdt.Allowance.Reach), so that its quicker path
//	                  does not take it more of the admits at the limit
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
		first := !p.lag.set
		raised = p.lag.sample(age)
		if first {
			c.regionSampled(p, age) // a PoP sampled before had its region's recorded
		}
		c.sampled(now, p)
	}
	if raised {
		c.allowDirty = true
	}
}

// regionSampled records, with region voices, the first latency sampled of
// a message from a PoP of another region: until they are sampled
// themselves, that region's other PoPs take it (lagOf). What reaches this
// node of them is their region's stream, and they are heard through its
// heartbeat turns a heartbeat interval after their start: taking a
// heartbeat interval for each meanwhile held a fleet's cold start a
// horizon longer than its lag (0.95 of a central limiter's admits where
// it had 0.98).
func (c *Core) regionSampled(p *peer, age int64) {
	if !c.regionVoices() || p.id.Region == c.selfPoP.Region {
		return
	}
	if _, ok := c.region.lags[p.id.Region]; ok {
		return
	}
	if c.region.lags == nil {
		c.region.lags = map[string]int64{}
	}
	if len(c.region.lags) >= c.cfg.MaxPoPs {
		return
	}
	c.region.lags[p.id.Region] = age
	c.remote.ok = false // its PoPs not sampled yet take it: walk again
	c.allowDirty = true
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
			hop := int64(c.cfg.FlushInterval) + int64(c.cfg.SpeakDelay)
			if c.cfg.FlushInterval == 0 {
				hop += popH
			}
			h, reach := far, far+hop
			if members > 1 {
				h += hop
			}
			if c.regionVoices() {
				// To the other regions through the region's voice: its
				// flush slot and speaker (region.go).
				reach += int64(c.cfg.FlushInterval) + int64(c.cfg.SpeakDelay)
				if !c.region.voice {
					h += int64(c.cfg.FlushInterval) + int64(c.cfg.SpeakDelay)
				}
			}
			ga.Horizon = time.Duration(max(h, popH))
			if reach > int64(ga.Horizon) {
				ga.Reach = time.Duration(reach)
			}
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
// count: how many and the largest latency among them. A
// message that moves one PoP's latency then costs O(log PoPs) rather than
// a walk over every PoP. It stays exact while ok and now is in [at,
// until]: until is the earliest time a counted PoP turns silent, a PoP
// that starts counting (heard first, or again after a silence) joins it,
// and a sample of a PoP the view holds that no longer counts invalidates
// it.
type remotePoPs struct {
	ok        bool
	at, until int64
	part      uint64 // the partVersion it was computed under
	pops      int
	far       int64
	lags      lagMax // the latency of every PoP counted, by slot
}

// sampled updates the view after remote PoP p's latency was sampled at
// now.
func (c *Core) sampled(now int64, p *peer) {
	r := &c.remote
	if !r.ok {
		return
	}
	if !r.lags.has(p.slot) || r.lags.get(p.slot) < 0 {
		c.joinView(now, p)
		return
	}
	if !c.countsNow(p, now) {
		r.ok = false // no longer counts: walk again (rare, as until covers silences)
		return
	}
	r.lags.set(p.slot, c.lagOf(p))
	r.far = r.lags.max()
}

// joinView adds remote PoP p to the view when it counts at now and the
// view does not hold it yet: a PoP heard first, or again after a silence.
func (c *Core) joinView(now int64, p *peer) {
	r := &c.remote
	switch {
	case !r.ok || !c.countsNow(p, now):
	case !r.lags.has(p.slot):
		r.ok = false // a PoP added since the walk: walk again, with room for it
	case r.lags.get(p.slot) < 0:
		r.lags.set(p.slot, c.lagOf(p))
		r.pops++
		if p.heardOnce {
			r.until = min(r.until, p.lastHeard+int64(c.cfg.PeerTimeout))
		}
		r.far = r.lags.max()
	}
}

// countsNow reports whether remote PoP p counts at now (remoteView).
func (c *Core) countsNow(p *peer, now int64) bool {
	if p.heardOnce {
		return !c.silent(p, now)
	}
	// Never heard: only until the first check of the peers, or while it
	// is awaited (liveness.go).
	return p.expected && (c.partVersion == 0 || c.awaited(p, now))
}

// regionHeard reports whether a message of region's stream (its totals or
// heartbeat turns, from another region with region voices) has arrived.
func (c *Core) regionHeard(region string) bool {
	_, ok := c.region.lags[region]
	return ok
}

// lagOf returns remote PoP p's latency: as measured, or before any sample
// the first sampled of its region (with region voices, for a PoP of
// another region: regionSampled), else a heartbeat interval.
func (c *Core) lagOf(p *peer) int64 {
	if p.lag.set {
		return p.lag.max
	}
	if lag, ok := c.region.lags[p.id.Region]; ok && c.regionVoices() && p.id.Region != c.selfPoP.Region {
		return lag
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
	lags := r.lags
	*r = remotePoPs{ok: true, at: now, until: math.MaxInt64, part: c.partVersion, lags: lags}
	r.lags.reset(int(c.peers.slots))
	for _, p := range c.peers.m {
		if !c.countsNow(p, now) {
			continue // partitioned (its counts are frozen, it hears nothing of ours), or never heard
		}
		if p.heardOnce {
			r.until = min(r.until, p.lastHeard+int64(c.cfg.PeerTimeout))
		}
		r.pops++
		r.lags.put(p.slot, c.lagOf(p))
	}
	r.lags.build()
	r.far = r.lags.max()
	return *r
}
