package pop

// What a side's asked counts say of its demand during a partition.
//
// Every node holds what its side's replicas were asked in each window of
// a cut (asked.go), and the fleet's demand in the window seen whole before
// it, each side's part of it too (askedPart). A side past the fleet's
// demand before the cut surged, whatever else moved, and grows no share
// (overFleet).
//
// A side's growth F (share_side.go) is one node's traffic taken for its
// side's, and a failover need not come to every node of a side alike:
// clients that move to one PoP of several triple that PoP's demand (past
// what a failover brings: read as a surge) and leave the others' where it
// was (no failover), so each kept its part of the limit while the side
// carried all of the fleet's demand (0.73-0.78 of a central limiter's
// admits). What the side's replicas were asked, replicated between its
// PoPs, tells the side's growth itself: where it ran past F, or where F
// would carry the side past the fleet's demand and the side's growth does
// not, it stands for F, and each key's own growth is scaled by it over F
// (bySide), at a window's close and as a window runs.

// askedPart takes this side's part of the rule's demand in the window
// before the cut from its admits adm and its refused cost ref there
// ([this side's, the fleet's], asked.go), the fleet's refused cost taken
// up to refusedReadCap times its admits (and this side's up to the
// fleet's); and the fleet's demand there, fleetAsked, from what its PoPs
// were asked (each at least what it admitted), taken up to its admits and
// that much refused. Without any refused cost it leaves the part of the
// admits, and no fleet's demand (overFleet reads nothing).
func (d *sideDemand) askedPart(adm, ref [2]uint64, asked uint64) {
	if adm[1] == 0 || ref[1] == 0 {
		return
	}
	most := float64(adm[1]) * refusedReadCap
	r1 := min(float64(ref[1]), most)
	r0 := min(float64(ref[0]), r1)
	a := float64(adm[0]) / float64(adm[1])
	q := (float64(adm[0]) + r0) / (float64(adm[1]) + r1)
	if a <= 0 || q <= 0 {
		return
	}
	d.part, d.asked = q, q/a
	d.fleetAsked = min(float64(asked), float64(adm[1])+most)
}

// watch reads overFleet once a probe step of window win, e of it passed,
// so that every window of the cut is read as it runs, whether or not a key
// probes it: a window is judged at its close by what was read of it.
func (d *sideDemand) watch(win int64, e, step float64) {
	if d == nil || d.sideAsked == nil || e < probeFrom || d.ovStep.Load() == win*(probeSteps+1)+int64(e*probeSteps) {
		return
	}
	d.overFleet(win, e, step)
}

// overReading is what overFleet read of one window: at which probe step
// it last read it, what the side was asked by each step (0: not read),
// and whether the side's demand was past the fleet's at any step.
type overReading struct {
	win  int64
	at   int64
	hist [probeSteps + 1]uint64
	over bool
	// rate is the side's demand at its rate over a whole window as last
	// read, measured on bandDemand at least (0: on fewer, whose noise
	// alone reads as the growth a failover of a fifth of the demand
	// shows: 1 s windows of 540 requests a side, probed on a fifth of a
	// window, grew shares 1.27 times past the limit).
	rate float64
}

// overFleet reports whether this side's demand in window win, e of it
// passed (1: closed), at its rate over the whole window, is more than
// 1+step times the whole fleet's demand before the cut, as the asked
// counts of this side's replicas say it (asked.go), or was at an earlier
// step of the window. A failover brings a side the fleet's demand, give or
// take its noise; a side past that surged, whatever else moved, and grows
// no share for it: the other side may still be spending its own (a side
// whose growth is counted up to what a failover could bring, and no
// further, took a surge to 1.5-3 times its demand for one: 1.1-1.6 times
// the limit). False while unknown: no asked count before the cut, or
// fewer than minSideDemand of it.
//
// Inside a window, the rate is that since a probe step probeFrom of a
// window back, when read there: a surge late in the window, averaged with
// the demand before it, hid under a takeover a probe made on the growth
// since it (a side of 0.72 of the demand rising twice, 1.39 times the
// limit). Once past, the window stays past: a key's refused cost counts up
// to refusedCap times its limit a window (crdt), so the asked counts of
// keys far over their limit stop growing early in a window, and a surge of
// every key to 30 times its limit read as past the fleet's demand only
// until then (the shares grew back, 1.35 times the limit).
func (d *sideDemand) overFleet(win int64, e, step float64) bool {
	if d == nil || d.sideAsked == nil || d.fleetAsked < minSideDemand || e < probeFrom {
		return false
	}
	at := int64(e * probeSteps)
	d.ovStep.Store(win*(probeSteps+1) + at)
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &d.ov[win&1]
	if r.win != win {
		*r = overReading{win: win, at: -1}
	}
	if r.at == at || r.over {
		return r.over
	}
	r.at = at
	c := d.sideAsked(win)
	r.hist[at] = c
	rate, n := float64(c)/e, c
	if back := at - int64(probeFrom*probeSteps); back > 0 && e < 1 {
		if b := r.hist[back]; b > 0 && b <= c {
			rate, n = float64(c-b)/(e-float64(back)/probeSteps), c-b
		}
	}
	r.over = rate > (1+step)*d.fleetAsked
	r.rate = 0
	if n >= bandDemand {
		r.rate = rate
	}
	return r.over
}

// bySide returns the side's growth in window win as overFleet last read
// it (sideGrowth) where it should stand for f, this node's, and that growth
// over f, the scale of each key's own growth: where it ran past f (the side
// took a failover this node's traffic does not show), or where f taken for
// the side's would carry it past the fleet's demand before the cut (1+step
// of it) and the side's does not (the failover came to this node, not to
// its side's other nodes). Otherwise it returns 1 and f.
func (d *sideDemand) bySide(win int64, f, step float64) (scale, growth float64) {
	sg, ok := d.sideGrowth(win)
	switch {
	case !ok || f <= 0:
		return 1, f
	case sg > f, f*d.part > 1+step && sg*d.part <= 1+step:
		return sg / f, sg
	}
	return 1, f
}

// sideGrowth returns the side's growth in window win as overFleet last
// read it: its rate since a probe step probeFrom back (or since the
// window's start; the whole window once closed) over its part of the
// fleet's demand before the cut; false while unknown, or measured on fewer
// than bandDemand.
func (d *sideDemand) sideGrowth(win int64) (float64, bool) {
	if d == nil || d.sideAsked == nil || d.fleetAsked < minSideDemand || d.part <= 0 {
		return 0, false
	}
	d.mu.Lock()
	r := d.ov[win&1]
	d.mu.Unlock()
	if r.win != win || r.rate <= 0 {
		return 0, false
	}
	return r.rate / (d.part * d.fleetAsked), true
}
