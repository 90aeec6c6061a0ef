package pop

import (
	"sync"
	"sync/atomic"
)

// What a side's total says of its demand during a partition.
//
// One key's demand cannot tell a failover from a surge: when a key's
// demand grows on this side, its traffic may have moved here from the
// other side (a failover: a dead site looks exactly like a partitioned
// one), or grown on both sides at once (a key under attack everywhere). A
// whole-site failover moves every key's traffic, so this node's total over
// all the rule's keys grows with it; a surge of one key leaves the total
// where it was. So every node also counts, per share rule, its demand over
// all keys in each window of the cut; its first whole window is the
// baseline, and each later whole window's total over it is the side's
// growth F (this node's traffic taken for its side's, as for one key).
//
// Each key's contribution to the total is capped at what a full failover
// could bring it: its demand in the baseline window over this side's part
// of the fleet's counts before the cut (its traffic if every PoP's moved
// here); a key this node did not serve in the baseline (a client that moved
// here) at that of an average key. A key surging far past that adds no more
// than a key that failed over, so one key's surge barely moves F however
// hard it surges, and F stays the growth of the side's traffic at large.
//
// A key then grows its share only as far as the side grew: its own growth
// is capped at F (the rest is its surge, which the other side sees too), and
// a key with too few requests to measure its own growth (minShareDemand)
// takes F. With a single key F is that key's growth again, and a surge and
// a failover look alike (a growth under partJump against the demand before
// the cut grows a share by ShareRise only while the key's own demand stays
// within the fleet's before it: share_demand.go, grow).

// minSideDemand is the least demand (in cost units, all keys together) a
// node must see in the baseline window before F speaks; partSideDemand
// what it must see in the part of the window a cut began in for that part
// to be the baseline: its rate, scaled to a whole window, then errs by a
// few percent (and so does the growth probed inside later windows against
// it), where a hundred requests in a short part err by a tenth and more.
// preSideDemand is what it must see in the whole window before the cut
// (preCut), whose growth must pass partJump: with fewer, on 1 s windows,
// one window's noise read as a failover (skewed-two-pops-1s, 225 requests
// a window at each node, went to 1.38 of its limit in its cut at 100 and
// 200; at 1.34 to 2 times its rate, 300 to 450 a window, its cut stays
// at 1.11-1.14 with the baseline as without it); at 400, the nodes of
// PoPs of three took no baseline in a fleet drawn with 330-400 requests a
// window each, and a failover at the cut was folded into the cut's window
// (0.79 of central in the cut; 0.85 at 300).
const (
	minSideDemand  = 100
	partSideDemand = 4 * minSideDemand
	preSideDemand  = 3 * minSideDemand
)

// earlySideDemand is what the early part of the window a cut began in must
// hold to be its baseline (markBase), and partJump how far the part's
// whole rate must run above the early part's for the early one to be
// taken: the early rate errs by up to a tenth, and taken on every cut it
// moved a side's growth enough to keep it under its takeover in
// heal-after-failover-1m (0.76 of central in the cut, 0.82 before); a
// failover in the part doubles it or more.
const (
	earlySideDemand = partSideDemand
	partJump        = 1.5
)

// sideDemand is one node's demand for one share rule over all keys, by
// window of a partition. Safe for concurrent use.
type sideDemand struct {
	// part is this side's part of the rule's demand in the window seen
	// whole before the cut (0: no count): of what the fleet admitted and
	// refused there, or of its admits alone where no refused count is
	// known (askedPart). asked is that part over this side's part of the
	// admits (0: 1), which a key's part of the admits is taken times for
	// its part of the demand (share.asked).
	part  float64
	asked float64
	// fleetAsked is the fleet's demand in that window, admits and refused
	// cost (askedPart; 0: unknown), and sideAsked reads this side's
	// demand in a window of the cut from the replicated asked counts
	// (nil: none): overFleet.
	fleetAsked float64
	sideAsked  func(win int64) uint64
	// overFleet's readings of the last two windows (by index parity), and
	// the last window and probe step read (watch).
	ov     [2]overReading
	ovStep atomic.Int64
	// startWin is the window the cut began in and cover the part of it
	// left then: at cover >= minCover the demand counted in it from the
	// cut on, at its rate over a whole window, is the baseline
	// (share_demand.go).
	startWin int64
	cover    float64

	win atomic.Int64  // the window counted in cur
	cur atomic.Uint64 // its demand so far

	mu    sync.Mutex // window changes, and what they close
	whole bool       // win was counted from its start
	// base is the demand of the baseline window (baseWin; at its rate
	// over a whole window, baseScale times what it counted), baseKeys
	// how many keys it counted; last that of the last whole window
	// (lastWin).
	base, last       uint64
	baseWin, lastWin int64
	baseKeys         int
	baseScale        float64
	keys             int // keys counted in win so far
	// win's demand at two marks taken as it runs, at elapsed parts markE
	// and nextE of it (projected).
	markC, nextC uint64
	markE, nextE float64
	// The demand of window startWin by its early mark, a part earlyE of
	// the window after the cut (markBase); early is set once it is taken.
	earlyC uint64
	earlyE float64
	early  atomic.Bool
	// partGrowth is how far the demand of the whole part of window
	// startWin ran above its early part's rate, once it closed (1: less
	// than partJump above, or not marked).
	partGrowth float64
	// pre: base is this node's demand in the window seen whole before the
	// cut (preBase, preFrom), set before the partition is published.
	pre atomic.Bool
}

// preLoaded reports whether d (nil: none) has the demand before the cut
// as its baseline.
func (d *sideDemand) preLoaded() bool {
	return d != nil && d.pre.Load()
}

// preFrom takes the baseline of o, the side of the partition before this
// one's change of shape, when it was the demand before the cut (preBase),
// and reports whether it was.
func (d *sideDemand) preFrom(o *sideDemand) bool {
	o.mu.Lock()
	base, win, keys, pre := o.base, o.baseWin, o.baseKeys, o.pre.Load()
	o.mu.Unlock()
	if !pre {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.base, d.baseWin, d.baseKeys, d.baseScale = base, win, keys, 1
	d.pre.Store(true)
	return true
}

// preBase makes c, this node's demand over keys keys in the window seen
// whole before the cut, the baseline: the window the cut began in is then
// measured against it from the cut on, as the windows after it are.
func (d *sideDemand) preBase(c uint64, keys int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.base, d.baseWin, d.baseKeys, d.baseScale = c, d.startWin-1, keys, 1
	d.pre.Store(true)
}

// add counts cost (already capped) of a decision in window idx; first says
// it is the key's first in that window.
func (d *sideDemand) add(idx int64, cost uint64, first bool) {
	if d.win.Load() != idx {
		d.roll(idx)
	}
	d.cur.Add(cost)
	if first {
		d.mu.Lock()
		d.keys++
		d.mu.Unlock()
	}
}

// roll closes the windows before idx. A decision racing with it may count
// in the next window: a few requests, at its edge.
func (d *sideDemand) roll(idx int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.win.Load()
	if idx <= w {
		return
	}
	switch {
	case w != 0 && idx == w+1 && w == d.startWin && d.pre.Load() && d.cover > 0:
		// The window the cut began in, from the cut on, at its rate over
		// the whole window, against the demand before the cut.
		d.last, d.lastWin = uint64(float64(d.cur.Load())/d.cover+0.5), w
	case w != 0 && idx == w+1 && d.whole:
		c := d.cur.Load()
		if d.base == 0 {
			d.base, d.baseWin, d.baseKeys, d.baseScale = c, w, d.keys, 1
		}
		d.last, d.lastWin = c, w
	case w != 0 && idx == w+1 && w == d.startWin && d.base == 0 && d.cover >= minCover && d.cur.Load() >= partSideDemand:
		// The window the cut began in, counted from the cut on: at the
		// rate of its early part when marked (markBase).
		d.baseScale = 1 / d.cover
		base := float64(d.cur.Load()) * d.baseScale
		if d.earlyE > 0 && d.earlyC > 0 {
			if early := float64(d.earlyC) / d.earlyE; base >= partJump*early {
				d.partGrowth, base = base/early, early
			}
		}
		d.base, d.baseWin, d.baseKeys = uint64(base+0.5), w, d.keys
	}
	d.whole = w != 0 && idx == w+1
	d.cur.Store(0)
	d.keys = 0
	d.markC, d.markE, d.nextC, d.nextE = 0, 0, 0, 0
	d.win.Store(idx)
}

// markBase marks the demand of window idx, the one the cut began in, once
// markFrom of it has passed since the cut with earlySideDemand counted
// (see share.markBase).
func (d *sideDemand) markBase(idx, elapsed, width int64) {
	if d.pre.Load() || d.early.Load() || idx != d.startWin || d.cover < minCover || width <= 0 || d.cur.Load() < earlySideDemand {
		return
	}
	since := float64(elapsed)/float64(width) - (1 - d.cover)
	if since < markFrom || since > d.cover/2 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.earlyE == 0 && d.win.Load() == idx {
		d.earlyC, d.earlyE = d.cur.Load(), since
		d.early.Store(true)
	}
}

// grewInPart returns partGrowth (1 before the window the cut began in
// closed, or when its early part was not marked).
func (d *sideDemand) grewInPart() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return max(d.partGrowth, 1)
}

// growth returns F for the window closed just before idx: the last whole
// window's demand over the baseline's, once the baseline is big enough to
// speak and the window before idx was whole.
func (d *sideDemand) growth(idx int64) (float64, bool) {
	d.roll(idx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.base < minSideDemand || d.lastWin != idx-1 || d.lastWin == d.baseWin {
		return 0, false
	}
	return float64(d.last) / float64(d.base), true
}

// capFor returns the most a key whose demand in the baseline window was
// kb (inBase: it had a decision there) may add to a window's total, once
// the baseline is known (ok).
func (d *sideDemand) capFor(kb uint64, inBase bool) (uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.base == 0 || d.part <= 0 {
		return 0, false
	}
	b := float64(kb) * d.baseScale
	if !inBase {
		b = float64(d.base) / float64(max(d.baseKeys, 1))
	}
	return uint64(b/d.part + 0.5), true
}

// projected returns F for window idx while it runs, e of it passed: its
// demand so far over the baseline's share of e, once the baseline speaks
// and idx was counted from its start; n is the demand F was measured on.
func (d *sideDemand) projected(idx int64, e float64) (f float64, n uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// The baseline, and where the window's demand was counted from: in
	// the window the cut began in, once marked, the rate of its early part
	// and the cut (markBase).
	base, startE := float64(d.base), 0.0
	if !d.whole && idx == d.startWin && d.pre.Load() {
		startE = 1 - d.cover
	} else if !d.whole && idx == d.startWin && d.earlyE > 0 {
		base, startE = float64(d.earlyC)/d.earlyE, 1-d.cover
	} else if !d.whole || d.baseWin >= idx {
		return 0, 0, false
	}
	if base < minSideDemand || d.win.Load() != idx || e <= startE {
		return 0, 0, false
	}
	// Since the mark at least probeFrom ago (the window's start, or the
	// cut, before): the demand before a failover inside the window does
	// not dilute it.
	c := d.cur.Load()
	from, fromE := uint64(0), startE
	defer func() {
		if fromE == startE {
			f, n, ok = 0, 0, false
		}
	}()
	switch {
	case d.nextE > 0 && e-d.nextE >= probeFrom && d.nextC <= c:
		from, fromE = d.nextC, d.nextE
		d.markC, d.markE = d.nextC, d.nextE
		d.nextC, d.nextE = c, e
	case d.markE > 0 && e-d.markE >= probeFrom && d.markC <= c:
		from, fromE = d.markC, d.markE
	case d.nextE == 0:
		d.nextC, d.nextE = c, e
	}
	if e <= fromE || c-from < minSideDemand {
		// A segment of fewer requests than a baseline needs measures
		// them too coarsely: at 45 a segment, a node of a PoP of two
		// took the noise of a fifth of a 1 s window for a failover
		// (1.6 times its baseline's rate), grew its share while its
		// mate did not, and the side spent 0.8 of the limit beside the
		// other's half (1.41 of it).
		return 0, 0, false
	}
	return float64(c-from) / (base * (e - fromE)), c - from, true
}

// marked reports whether the early part of the window the cut began in is
// marked (markBase).
func (d *sideDemand) marked() bool { return d.early.Load() }

// baseline returns the baseline window (0 while unknown).
func (d *sideDemand) baseline() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.base == 0 {
		return 0
	}
	return d.baseWin
}
