package pop

import (
	"math"

	"github.com/geolimit/geolimit/crdt"

	"github.com/geolimit/geolimit/window"
)

// The window a heal ends in.
//
// Back on the global view after a heal, the sliding estimate weighs the
// previous window's count as if its admits were spread evenly over it.
// Two things a cut does make that untrue, and the true count of the
// trailing window then passes the limit by what the estimate took for
// gone while it was still there:
//
//   - A side held to its share refused demand the limit had room for (the
//     other side's demand moved to it, or fell). At the heal that room
//     opens at once and the side spends it in a burst: the window the heal
//     falls in holds few admits before the heal and many after it, which
//     the next window weighs as spread evenly (a region's failover in a
//     cut of 20 s windows, healed mid-window: 1.27 of the limit where the
//     central limiter stays at 1.03).
//   - A side's admits in the cut's windows come late where its share opens
//     as the window runs (a ramp, a grown share, the near-limit split), and
//     the first window after a heal at a window's edge weighs the cut's
//     last window as spread evenly (1.16 where central stays at 1.06).
//
// So the cut marks each key's count (as this node holds it: this side's,
// with the other side's counts frozen at the cut) at the node's first
// decision in each of the last profileMarks parts of its windows, and in
// the window the heal's hold ends in a key is held to two bounds:
//
//   - The previous window is weighed as it was spent: this side's part as
//     its marks say (linearly between them), the other side's, which came
//     after the heal, as spread evenly; what the estimate takes for gone
//     of it lowers the limit.
//   - The window's admits stay spread no later than evenly: at every
//     instant from the heal on (elapsed part e, the key's count there
//     C(e); at the heal, this side's count then and the other side's as
//     it arrived), and at this side's marks of the window before the heal
//     when the cut held all of it (the other side's count taken as all
//     come by then), its
//     total may not pass (C(e) + HealSlack x limit) / e,
//     nor need it stay under half the limit plus that slack (a key steady
//     below half its limit is not held by the noise of its arrivals). The
//     next window's estimate then errs by HealSlack of the limit at most;
//     what the bound holds back opens at the next window's start, where
//     the estimate weighs it as it is.
//
// Bound from the heal on only, a window a side spent late before the heal
// (its share grown as the window ran, to nearly the whole limit) kept its
// total, and the next window's estimate, weighing it as spread evenly,
// took its late admits for gone: 1.11 of the limit after a region's
// failover healed mid-window (failover-lone-region, 110 s, seed 2), 1.10
// on four other seeds; 1.080-1.095 with the marks.
//
// A key whose window was spread evenly on both sides (each side spent its
// share to the end of the cut) meets neither bound. From the next window
// on the node is back on the global view alone.

// HealSlack is how far over the limit, as a part of it, the estimate of
// the window after a heal may err through the admits of the window the
// heal ends in.
const HealSlack = 0.04

// healCap is the heal window state of one key (share.mu guards it).
type healCap struct {
	win int64   // the window max is for (0: none)
	max float64 // the most the window's total may reach
	// The previous window's counts as they stood at its marks (profile)
	// and at its end (this side's, and the other side's part, both held
	// since the heal), when the cut marked it (curve.n 0: not).
	curve spentCurve
	other float64
}

// spentCurve is a window's count as it stood at the cut's marks of it,
// from none at its start to its whole count at its end (n points; 0:
// none).
type spentCurve struct {
	pts [profileMarks + 2]struct{ e, c float64 }
	n   int
}

// fromMarks makes the curve of a window whose count is total from its
// marks; a mark out of order, or past total, is left out.
func (sc *spentCurve) fromMarks(marks *[profileMarks]profileMark, total float64) {
	sc.pts[0].e, sc.pts[0].c, sc.n = 0, 0, 1
	for _, m := range marks {
		if e, c := float64(m.e), float64(m.c); e > sc.pts[sc.n-1].e && c >= sc.pts[sc.n-1].c && c <= total {
			sc.pts[sc.n].e, sc.pts[sc.n].c, sc.n = e, c, sc.n+1
		}
	}
	sc.pts[sc.n].e, sc.pts[sc.n].c, sc.n = 1, total, sc.n+1
}

// after returns the part of the window's count that came after elapsed
// part f of it (linearly between the marks).
func (sc *spentCurve) after(f float64) float64 {
	var at float64
	for i := 1; i < sc.n; i++ {
		if a, b := sc.pts[i-1], sc.pts[i]; f <= b.e {
			at = a.c + (b.c-a.c)*(f-a.e)/(b.e-a.e)
			break
		}
	}
	return sc.pts[sc.n-1].c - at
}

// of returns the marks of window idx, if the cut marked it.
func (pr *windowProfile) of(idx int64) ([profileMarks]profileMark, bool) {
	switch {
	case pr.win == idx:
		return pr.cur, true
	case pr.prevWin == idx:
		return pr.prev, true
	}
	return [profileMarks]profileMark{}, false
}

// profileMarks is how many times a window of a cut is marked.
const profileMarks = 3

// profileMark is a key's count (as this node held it, up to 2^32-1) at
// elapsed part e of a window (0: not marked).
type profileMark struct {
	e float32
	c uint32
}

// windowProfile is the key's count at the first decision in each of the
// last profileMarks parts of a window of the cut, for that window (win)
// and the one before it (prevWin).
type windowProfile struct {
	win, prevWin int64
	cur, prev    [profileMarks]profileMark
}

// mark notes the key's count of window idx at the node's first decision
// in each part of it during a cut (share.mu not held).
func (n *Node) mark(sh *share, r *ruleState, key string, idx, elapsed int64) {
	if r.cal != nil || r.width <= 0 {
		return
	}
	k := int(elapsed * (profileMarks + 1) / r.width)
	if k < 1 || k > profileMarks {
		return
	}
	sh.mu.Lock()
	pr := &sh.prof
	if pr.win != idx {
		if pr.win == idx-1 {
			pr.prev, pr.prevWin = pr.cur, pr.win
		} else {
			pr.prevWin = 0
		}
		pr.cur, pr.win = [profileMarks]profileMark{}, idx
	}
	done := pr.cur[k-1].e != 0
	sh.mu.Unlock()
	if done {
		return
	}
	_, cur, ok := n.store.Peek(r.id, key, idx)
	if !ok {
		return
	}
	sh.mu.Lock()
	if pr.win == idx && pr.cur[k-1].e == 0 {
		pr.cur[k-1] = profileMark{float32(elapsed) / float32(r.width), uint32(min(cur, math.MaxUint32))}
	}
	sh.mu.Unlock()
}

// lookup returns key's share in p, or nil.
func (p *partition) lookup(r *ruleState, key string) *share {
	if sh := p.keys[shareKey{r.id, key}]; sh != nil {
		return sh
	}
	p.newKeys.mu.Lock()
	defer p.newKeys.mu.Unlock()
	return p.newKeys.m[shareKey{r.id, key}]
}

// healMarks returns, per key of a share rule, this side's count (the PoPs
// p does not list as unheard) of the window the heal at now falls in.
func (n *Node) healMarks(p *partition, now int64) map[shareKey]uint64 {
	rs := n.rules.Load()
	marks := map[shareKey]uint64{}
	n.store.Entries(n.indexFunc(rs, now), func(rep crdt.ReplicaID, e crdt.FlushEntry) {
		r := rs.byID[e.Rule]
		if r == nil || r.OnPartition != Share || r.Scope != ScopeGlobal || r.cal != nil || e.Window != r.index(now) ||
			p.others.of(p, n.store, rep) {
			return
		}
		marks[shareKey{e.Rule, e.Key}] += e.Count
	})
	return marks
}

// healLimit returns the limit key is held to at now in the window the heal
// of p ends in (see above), and whether it is held at all. The caller
// checked that p healed at least HealHold ago.
func (n *Node) healLimit(p *partition, r *ruleState, key string, now, idx, elapsed int64) (float64, *share, bool) {
	if r.cal != nil || r.width <= 0 || elapsed <= 0 || idx != r.index(p.healed+n.healHold) {
		return 0, nil, false
	}
	sh := p.lookup(r, key)
	if sh == nil {
		return 0, nil, false
	}
	prev, cur, ok := n.store.Peek(r.id, key, idx)
	if !ok {
		return 0, nil, false
	}
	limit := float64(r.Limit)
	slack := HealSlack * limit
	within := p.healed > r.start(idx) // the heal fell in this window
	sh.mu.Lock()
	first := sh.heal == nil || sh.heal.win != idx
	sh.mu.Unlock()
	var oPrev, oCur uint64
	if first {
		// The other side's counts, come during the hold, were spent
		// before the heal.
		oPrev, oCur, _ = n.store.PeekOf(r.id, key, idx, func(id crdt.ReplicaID) bool { return p.others.of(p, n.store, id) })
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.heal == nil {
		sh.heal = &healCap{}
	}
	h := sh.heal
	if h.win != idx {
		h.win, h.max, h.curve.n = idx, math.Inf(1), 0
		if within {
			e := float64(p.healed-r.start(idx)) / float64(r.width)
			h.max = (float64(p.marks[shareKey{r.id, key}]+oCur) + slack) / e
			// And at this side's marks of the window before the heal,
			// the other side's admits taken as all come by then (a PoP
			// that stopped or crashed spent them before it did), when the
			// cut held the whole of the window before the heal: a
			// shorter one spent little of it by its shares, and the
			// marks of a node catching up on the window (restarted into
			// the cut) fall short of its count.
			if marks, ok := sh.prof.of(idx); ok && p.since <= r.start(idx) {
				for _, m := range marks {
					if me := float64(m.e); me > 0 && me < e {
						h.max = min(h.max, (float64(m.c)+float64(oCur)+slack)/me)
					}
				}
			}
		}
		marks, marked := sh.prof.of(idx - 1)
		if side := float64(prev) - float64(oPrev); marked && side > 0 {
			h.curve.fromMarks(&marks, side)
			h.other = float64(oPrev)
		}
	}
	f := float64(elapsed) / float64(r.width)
	lim := limit
	if h.curve.n > 0 {
		// The previous window's counts still in the trailing window: this
		// side's as its marks say they came, the other side's spread
		// evenly; what the estimate takes for gone of them is held back.
		trailing := h.curve.after(f) + h.other*(1-f)
		lim -= max(trailing-window.Estimate(prev, 0, elapsed, r.width), 0)
	}
	h.max = max(min(h.max, (float64(cur)+slack)/f), limit/2+slack)
	return min(lim, window.Estimate(prev, 0, elapsed, r.width)+h.max), sh, true
}

// healWindowsEnd returns when the last window a heal at healed ends in
// (its hold included) closes, over the share rules of rs.
func (n *Node) healWindowsEnd(rs *ruleSet, healed int64) int64 {
	end := healed + n.healHold
	for _, r := range rs.sorted {
		if r.OnPartition == Share && r.Scope == ScopeGlobal && r.cal == nil && r.width > 0 {
			end = max(end, r.start(r.index(healed+n.healHold)+1))
		}
	}
	return end
}
