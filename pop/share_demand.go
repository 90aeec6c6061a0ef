package pop

// How a side's share follows its demand during a partition.
//
// Every node counts, per key and window of the cut, its own demand: the cost
// asked, admitted or not. Its baseline is its demand in the window seen
// whole before the cut when it can tell it, for every key it served there
// (preCut: what it admitted, and for a key near its limit what it denied,
// crdt's OwnDemand): a failover at the moment of the cut, which a site that
// dies makes, then shows against the demand before it, and measured against
// it a key or the side's total must grow partJump past it to grow a share
// (demand that rose on both sides reads as growth too). A cut in the
// fleet's first window, with no window before it, takes the part of that
// window before the cut, at its rate over a whole window (preCut,
// firstSpan). Otherwise, the
// window the cut began in, counted from the cut
// on, is its baseline when at least minCover of it was left and it held
// demand enough to measure (its demand at its rate over a whole window),
// else the first whole window of the cut. When the rest of the window the
// cut began in ran well above the rate of its early part (partJump), a
// failover came inside it: the early part is the baseline, and the rest of
// that window is probed against it for keys that marked their own (probe,
// markBase). The demand of each later
// window over the baseline (g) says how this side's demand
// moved since, taking the node's traffic for its side's. A failover in the
// cut's first whole window is then measured against the demand before it,
// not folded into the baseline (with long windows, most failovers happen
// in that window). At the cut the side
// carried its share of the fleet's demand (the share is its part of the base
// window's counts), so it now carries about g x share of it.
//
// One key's demand cannot tell whether the other side's demand fell when
// its own grew: a failover (a dead PoP looks exactly like a partitioned
// one) or traffic that grew on both sides. The node's total over all the
// rule's keys can (share_side.go): a key's growth counts only as far as the
// side's total grew with it (the rest is that key's own surge), and a key
// with too few requests to measure takes the side's growth. So a share
// grows past its snapshot only when its side's demand grew well past its
// baseline (by 2 x ShareStep at least; ShareStep when the side's total
// confirms it) and
// it carries nearly all of the fleet's demand (takeoverAt of it, and no more
// than the whole fleet asked before the cut plus ShareStep): then the other
// side has nearly nothing left to spend, and the share becomes this side's
// part of the fleet's demand, up to the whole limit. A side that lost all but
// 1 - takeoverAt of its demand shrinks its share the same way (so the side it
// moved to may take it), and grows back to its snapshot when its demand
// returns. A demand within ShareStep of its baseline moves no share. Demand
// that moves only partly (a follow-the-sun shift), or within a side, leaves
// the shares as they were: the side it left may still spend its own.
//
// A grown share opens as the previous window's counts decay (shareLimit):
// the other side may have spent its former share in that window, and its
// counts are not heard. What remains possible is traffic that moves back
// during the cut: until the side it leaves closes its window and shrinks,
// both may spend their grown shares, for up to a window.

// minShareDemand is the least demand (in cost units) a node must see in a
// window before its share follows it: fewer requests measure it too coarsely.
// A baseline taken from part of a window needs as many in that part.
const minShareDemand = 100

// minCover is the least part of the window a cut began in that must be
// left for the demand counted from the cut to be the baseline.
const minCover = 0.1

// takeoverAt is the part of the fleet's demand before the cut that a side
// must carry before its share grows past its snapshot.
const takeoverAt = 0.8

// demandScale returns the fleet's demand before the cut over the limit when
// base (the per-PoP counts of the window seen whole before it) shows a key
// clearly below its limit, where nothing was refused; 1 when it was at its
// limit or had no count.
func demandScale(base []popCount, limit uint64) float64 {
	var tot uint64
	for _, pc := range base {
		tot += pc.count
	}
	if tot == 0 || float64(tot) >= 0.9*float64(limit) {
		return 1
	}
	return float64(tot) / float64(limit)
}

// record notes a decision's cost in window idx, and adds it to the side's
// total up to the key's cap.
func (sh *share) record(idx int64, cost uint64) {
	sh.mu.Lock()
	if idx != sh.demandWin {
		sh.mu.Unlock()
		return
	}
	before := sh.demand
	sh.demand += cost
	add := cost
	if sh.capped {
		add = 0
		if before < sh.cap {
			add = min(cost, sh.cap-before)
		}
	}
	side := sh.side
	sh.mu.Unlock()
	if side != nil {
		side.add(idx, add, before == 0)
	}
}

// adapt closes the previous window's demand when a new window starts and
// lets the share follow it; inside a window it probes the demand so far
// (probe). It returns the share, the share in force in the previous window,
// and the ramp of a share grown inside a window.
func (sh *share) adapt(idx, now, elapsed, width int64, floor, step float64) (frac, prev float64, ramp shareRamp) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if idx < sh.demandWin {
		return sh.frac, sh.prev, sh.ramp
	}
	if idx == sh.demandWin {
		if width > 0 {
			sh.side.watch(idx, float64(elapsed)/float64(width), step)
		}
		sh.probe(idx, now, elapsed, width, floor, step)
		return sh.frac, sh.prev, sh.ramp
	}
	var f float64
	var sure bool // f, the side's growth, speaks (share_side.go)
	if sh.side != nil {
		f, sure = sh.side.growth(idx)
		if bw := sh.side.baseline(); !sh.capped && bw != 0 {
			sh.cap, sh.capped = sh.side.capFor(sh.demand, sh.demandWin == bw)
		}
	}
	sh.prev = sh.frac
	next := sh.demandWin != 0 && idx == sh.demandWin+1
	over := next && sh.side.overFleet(sh.demandWin, 1, step)
	scale := 1.0 // the side's growth over this node's (bySide)
	if next && sure {
		scale, f = sh.side.bySide(sh.demandWin, f, step)
	}
	switch {
	case sh.demandWin != 0 && !next:
		// No decision here in the previous window: the other side may have
		// spent all of it.
		sh.prev = min(floor, sh.frac)
	case next && !sh.whole && sh.pre && step >= 0 && sh.cover > 0 && sh.demand >= minShareDemand:
		// The window the cut began in, from the cut on, at its rate over
		// the whole window, against the demand before the cut (preCut).
		g := float64(sh.demand) / sh.cover / sh.baseDemand * scale
		own := g
		if sure && g > 1 {
			g = min(g, max(f, 1))
		}
		sh.follow(g, own, floor, step, sure, over)
	case next && !sh.whole && sh.sidePre():
		// A key too thin to measure before the cut, on a side whose
		// baseline is the demand before it: the window the cut began in
		// holds any failover at the cut, so it is no baseline for the
		// key; the side's growth against the demand before the cut is
		// the key's.
		if step >= 0 && sure && sh.demand > 0 {
			sh.follow(f, f, floor, step, true, over)
		}
	case next && !sh.whole && sh.demandWin == sh.win && sh.baseDemand == 0 && step >= 0 &&
		sh.cover >= minCover && sh.demand >= minShareDemand:
		// The window the cut began in, counted from the cut on: the
		// baseline at its rate, before any failover of the next window;
		// at the rate of its early part (markBase), before any failover
		// later in it.
		// A key too thin to mark takes the side's growth in that part
		// for its own.
		sh.baseDemand = float64(sh.demand) / sh.cover
		early := 0.0
		if sh.earlyE > 0 {
			early = float64(sh.earlyDemand) / sh.earlyE
		}
		switch {
		case early > 0:
			// Measured: its own early part says whether it moved.
			if sh.baseDemand >= partJump*early {
				sh.baseDemand = early
			}
		case sh.side != nil:
			sh.baseDemand /= sh.side.grewInPart()
		}
	case next && sh.whole && step >= 0 && sh.demand >= minShareDemand:
		if sh.baseDemand == 0 {
			// The key's first window with demand enough to measure. When
			// the side's total grew since its baseline, so did the key
			// (a key too thin to measure before a failover is measured
			// after it): its baseline is its demand before that growth.
			sh.baseDemand = float64(sh.demand)
			if sure && f > 1 {
				sh.baseDemand /= f
				sh.follow(f, f, floor, step, true, over)
			}
			break
		}
		g := float64(sh.demand) / sh.baseDemand * scale
		own := g
		if sure && g > 1 {
			g = min(g, max(f, 1)) // past the side's growth: this key's surge
		}
		sh.follow(g, own, floor, step, sure, over)
	case next && sh.whole && step >= 0 && sure && sh.demand > 0:
		sh.follow(f, f, floor, step, true, over) // too few requests: the side's growth
	}
	sh.demandWin, sh.demand, sh.whole, sh.probed = idx, 0, next, 0
	sh.markDemand, sh.markE, sh.nextDemand, sh.nextE = 0, 0, 0, 0
	return sh.frac, sh.prev, sh.ramp
}

// thinRise is how far past its rate before the cut the demand of a key too
// thin to measure alone must run since the cut, in the window the cut
// began in, to take its side's growth for its own there (probe): its
// count errs by a third and more, but a key whose demand did not move
// stays under it.
const thinRise = 1.25

// probeFrom is the part of a window that must have passed before the
// demand so far speaks for the window (probe), and probeSteps how many
// times a window is probed at most.
const (
	probeFrom  = 0.2
	probeSteps = 20
)

// probe lets a share grow inside window idx, once probeFrom of it has
// passed, when the demand so far, taken at its rate over the whole
// window, already shows the other side's demand moved here: a failover
// then costs this side a fraction of a window instead of up to two (the
// window it happened in mixes the demand before and after it, and a
// window closes before it is measured). Only growth is probed; a share
// shrinks when a window closes. The grown share opens from the budget in
// force over one window from now, as the other side's admits before its
// demand left decay. The caller holds sh.mu.
func (sh *share) probe(idx, now, elapsed, width int64, floor, step float64) {
	// The baseline, and where the window's demand was counted from. In the
	// window the cut began in, only a key that marked its own early part is
	// probed, against that part's rate and from the cut: a key too thin to
	// mark would take the side's growth, and there the side's total counts
	// every key uncapped (one key's surge read as a failover of all). Against
	// the demand before the cut (preCut) every key told is capped, and a key
	// too thin to measure alone takes the side's growth where its own demand
	// rose too (thinRise): a failover at the cut onto nodes whose keys are
	// thin then grows their shares within the window, not at its close. Both
	// must have moved partJump past their early rates, as the window's close
	// asks (a short early part errs by up to a tenth), but for a growth by
	// ShareRise (grow) measured on bandDemand of the side's.
	base, startE, inCut := sh.baseDemand, 0.0, false
	switch {
	case !sh.whole && (sh.pre || sh.sidePre()):
		// Against the demand before the cut (preCut), from the cut on: the
		// key's own, or for a key too thin to measure the side's growth
		// (its keys capped at what a failover brings them).
		if idx != sh.win || sh.side == nil {
			return
		}
		startE, inCut = 1-sh.cover, true
	case !sh.whole:
		sh.markBase(idx, elapsed, width)
		if idx != sh.win || sh.earlyE == 0 || sh.side == nil || !sh.side.marked() {
			return
		}
		base, startE, inCut = float64(sh.earlyDemand)/sh.earlyE, 1-sh.cover, true
	}
	if step < 0 || width <= 0 || elapsed*probeSteps < int64(probeFrom*probeSteps)*width {
		return
	}
	at := elapsed * probeSteps / width
	if at <= sh.probed {
		return
	}
	sh.probed = at
	e := float64(elapsed) / float64(width)
	if sh.side.overFleet(idx, e, step) {
		sh.frac = min(sh.frac, sh.snap) // a surge, not a failover: nothing grows
		return
	}
	var f float64
	var fn uint64
	var sure bool
	if sh.side != nil {
		f, fn, sure = sh.side.projected(idx, e)
	}
	if !sure {
		return // one key's demand alone may be its surge
	}
	scale, f := sh.side.bySide(idx, f, step) // the side's growth over this node's
	// The key's demand since its mark (at least probeFrom of a window ago,
	// else since the window's start, or the cut): the demand before a
	// failover inside this window does not dilute the demand after it.
	from, fromE := uint64(0), startE
	switch {
	case sh.nextE > 0 && e-sh.nextE >= probeFrom:
		from, fromE = sh.nextDemand, sh.nextE
		sh.markDemand, sh.markE = sh.nextDemand, sh.nextE
		sh.nextDemand, sh.nextE = sh.demand, e
	case sh.markE > 0 && e-sh.markE >= probeFrom:
		from, fromE = sh.markDemand, sh.markE
	case sh.nextE == 0:
		sh.nextDemand, sh.nextE = sh.demand, e
	}
	var g, own float64
	// The side's growth measured on bandDemand or more may grow a share
	// by ShareRise (grow).
	band := float64(fn) >= bandDemand
	switch {
	case base > 0 && e > fromE && float64(sh.demand-from) >= minShareDemand*(e-fromE):
		g = float64(sh.demand-from) / (base * (e - fromE)) * scale
		own = g
		if g > 1 {
			g = min(g, max(f, 1))
		}
	case sh.demand > 0 && !inCut:
		g, own = f, f
	case sh.demand > 0 && sh.sidePre() && sh.thinDemand > 0 && e > startE &&
		float64(sh.demand) >= thinRise*sh.thinDemand*(e-startE):
		// A key too thin to measure alone, in the window the cut began in:
		// the side's growth is its own where its demand since the cut
		// rose too (one key surging past its cap for a part of the window
		// reads in the side's total as a failover of every key).
		g, own = f, f
	default:
		return
	}
	if inCut && g < partJump && !band {
		return
	}
	open := sh.ramp.open(sh.frac, now) // the budget in force now
	if !sh.grow(g, own, step, sure, band) {
		return
	}
	sh.ramp = shareRamp{from: open, at: now, end: now - elapsed + 2*width}
}

// markBase marks, in window idx when it is the one the cut began in, the
// demand counted once markFrom of the window has passed since the cut
// with enough of it to measure (earlyShareDemand): the baseline is that
// early part's rate, not the whole part's, so that a failover later in the
// window the cut began in is measured against the demand before it, not
// folded into its baseline (a cut at a window's start, its traffic moving
// half a window later, kept a side at about half of what a central limiter
// admits through the cut). The side's total is marked alike. The caller
// holds sh.mu.
func (sh *share) markBase(idx, elapsed, width int64) {
	if sh.side != nil {
		sh.side.markBase(idx, elapsed, width)
	}
	if sh.earlyE > 0 || idx != sh.win || sh.cover < minCover || width <= 0 || sh.demand < earlyShareDemand {
		return
	}
	if since := float64(elapsed)/float64(width) - (1 - sh.cover); since >= markFrom && since <= sh.cover/2 {
		sh.earlyDemand, sh.earlyE = sh.demand, since
	}
}

// earlyShareDemand is what a key's early part of the window a cut began
// in must hold to be its baseline (markBase, partJump).
const earlyShareDemand = minShareDemand

// markFrom is the least part of a window after a cut that its early mark
// (markBase) measures: how many requests it holds (minShareDemand,
// earlySideDemand) bounds its noise; the time only keeps a burst at the
// cut from passing for its rate.
const markFrom = 0.05

// shareRamp opens a share grown inside a window: from the budget in force
// then (from, at at Unix nanoseconds; 0: none) to the share, linearly,
// until the end of the next window (end). The other side's admits before
// its demand left decay over a window; the sliding estimate of this
// side's own window of the growth, which weighs it as if its admits were
// spread evenly while they came mostly after the growth, errs low until
// that window has passed.
type shareRamp struct {
	from    float64
	at, end int64
}

// open returns the most of the limit the ramp lets a share of frac use at
// now.
func (r shareRamp) open(frac float64, now int64) float64 {
	if r.at == 0 || now < r.at || now >= r.end || frac <= r.from {
		return frac
	}
	return r.from + (frac-r.from)*float64(now-r.at)/float64(r.end-r.at)
}

// follow moves the share as the side's demand moved by g since the
// baseline; sure says the side's total confirms g, which then needs to pass
// ShareStep only once to move a share (twice otherwise: one key's demand
// is noisier). own is the key's own growth before g was capped at the
// side's. g is a whole window's, measured on demand enough for a growth a
// rise on both sides would show as well to grow the share by ShareRise
// (grow). over says the side's demand went past the whole fleet's before
// the cut (sideDemand.overFleet): a surge, whatever else moved, so a share
// grown past its snapshot goes back to it and none grows. The caller holds
// sh.mu.
func (sh *share) follow(g, own, floor, step float64, sure, over bool) {
	if over && sh.frac > sh.snap {
		sh.frac = sh.snap // a surge, not a failover (overFleet)
		return
	}
	if !over && sh.grow(g, own, step, sure, true) {
		return
	}
	part := g * sh.snap  // the side's part of the fleet's demand before the cut
	t := part * sh.scale // the same, as a fraction of the limit
	switch {
	case g > 1+step && sh.frac < sh.snap:
		sh.frac = min(t, sh.snap) // back towards the snapshot
	case g <= 1-takeoverAt && t < sh.frac:
		sh.frac = max(t, floor) // this side's demand moved away
	}
}

// asked is how many times its part of the admits the key's side's part of
// the demand before the cut is taken for: its side's (sideDemand.asked),
// 1 without one. The key's part of the admits before the cut (its
// snapshot) read so is its part of what the fleet asked of it; a key's
// admits over its limit follow the replicas, not the demand. A key without
// counts before the cut (split by PoP count) takes 1. The caller holds
// sh.mu.
func (sh *share) asked() float64 {
	if sh.side == nil || sh.side.asked <= 0 || sh.base == nil {
		return 1
	}
	return sh.side.asked
}

// sidePre reports whether the key's side measures its growth against the
// demand before the cut while the key has no baseline of its own there
// (too thin to measure, or not served): it then takes the side's growth.
// The caller holds sh.mu.
func (sh *share) sidePre() bool {
	return !sh.pre && sh.baseDemand == 0 && sh.side != nil && sh.side.pre.Load()
}

// grow takes the share to this side's part of the fleet's demand when the
// side's demand grew by g since the baseline and it now carries nearly all
// of the fleet's demand (the other side's demand moved here), and reports
// whether it did. The caller holds sh.mu.
//
// Against the demand before the cut, demand that rose on both sides while
// they were cut reads as growth too: a rise of every key by 1.3 times took
// a side to its takeover; so a growth against it must pass partJump. A
// failover of a fifth to a third of the demand grows a side by 1.25 to 1.5
// times, as such a rise does, and the side kept its snapshot (0.67-0.80 of
// a central limiter's admits). Below partJump the share now grows by at
// most its rule's ShareRise past its snapshot: a rise on both sides then
// takes the fleet at most that far over its limit (only one side can carry
// takeoverAt of the demand). Only when band says the growth was measured
// on demand enough (a whole window's, or a probed part with bandDemand of
// the side's), and the key's own growth (own, before it was capped at the
// side's) keeps it within the fleet's demand before the cut: a side's
// total counts a key at most as far as a failover could take it, so a
// surge of every key on both sides reads, capped, as a whole failover
// (one key at 3.3 and 10 times its demand on the two sides grew a side of
// three quarters by ShareRise).
func (sh *share) grow(g, own, step float64, sure, band bool) bool {
	q := sh.asked()
	part := g * sh.snap * q // the side's part of the fleet's demand before the cut
	t := part * sh.scale    // the same, as a fraction of the limit
	gate := 1 + 2*step
	if sure {
		gate = 1 + step
	}
	most := 1.0
	if g < partJump && (sh.pre || (sh.side != nil && sh.side.pre.Load())) {
		if !band || own*sh.snap*q > 1+step {
			return false
		}
		most = sh.snap + sh.rise
	}
	if g >= gate && part >= takeoverAt && part <= 1+step {
		if to := min(t, most); to > sh.frac {
			sh.frac = to // the other side's demand moved here
			return true
		}
	}
	return false
}

// bandDemand is the least demand of a side's probed part of a window (a
// fifth of a window at least) whose growth may grow its shares by
// ShareRise (grow): with fewer, its noise alone reaches the growth a
// failover of a fifth of the demand shows (a side of one key whose demand
// did not move grew past its snapshot on a probe of 70 requests,
// rolling-cuts going to 1.10 of its limit).
const bandDemand = 4 * minShareDemand
