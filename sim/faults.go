package sim

import (
	"slices"
	"sort"

	"github.com/geolimit/geolimit/repl"
)

type actKind uint8

const (
	actPartition actKind = iota
	actCut
	actHeal
	actSkew
	actCrash
	actStop
	actRestart
	actPause
	actResume
)

// action is a resolved scenario event.
type action struct {
	at     int64
	kind   actKind
	groups [][]int32 // partition groups of PoPs; cut: {from, to}
	nodes  []int32
	offset int64
	hold   bool // a heal inside a flap: the partitioned phase goes on
}

type phaseSpan struct {
	name     string
	from, to int64
}

// buildActions resolves the scenario's events into actions sorted by time
// (file order among equal times; a flap expands into partitions and heals)
// and derives the phases from them.
func (e *engine) buildActions() error {
	for _, ev := range e.sc.Events {
		at := int64(ev.At)
		switch {
		case ev.Partition != nil:
			e.actions = append(e.actions, action{at: at, kind: actPartition, groups: e.groups(ev.Partition)})
		case ev.Cut != nil:
			e.actions = append(e.actions, action{at: at, kind: actCut, groups: [][]int32{e.popsOf(ev.Cut.From), e.popsOf(ev.Cut.To)}})
		case ev.Heal:
			e.actions = append(e.actions, action{at: at, kind: actHeal})
		case ev.Flap != nil:
			f := ev.Flap
			g := e.groups(f.Partition)
			for t := at; t < int64(f.Until); {
				e.actions = append(e.actions, action{at: t, kind: actPartition, groups: g})
				h := min(t+int64(f.CutFor), int64(f.Until))
				t = h + int64(f.HealFor)
				e.actions = append(e.actions, action{at: h, kind: actHeal, hold: t < int64(f.Until)})
			}
		case ev.ClockSkew != nil:
			e.actions = append(e.actions, action{at: at, kind: actSkew, nodes: e.nodesOf([]string{ev.ClockSkew.Node}), offset: int64(ev.ClockSkew.Offset)})
		case ev.Crash != nil:
			e.actions = append(e.actions, action{at: at, kind: actCrash, nodes: e.nodesOf(ev.Crash)})
		case ev.Stop != nil:
			e.actions = append(e.actions, action{at: at, kind: actStop, nodes: e.nodesOf(ev.Stop)})
		case ev.Restart != nil:
			e.actions = append(e.actions, action{at: at, kind: actRestart, nodes: e.nodesOf(ev.Restart)})
		case ev.Pause != nil:
			e.actions = append(e.actions, action{at: at, kind: actPause, nodes: e.nodesOf(ev.Pause)})
		case ev.Resume != nil:
			e.actions = append(e.actions, action{at: at, kind: actResume, nodes: e.nodesOf(ev.Resume)})
		}
	}
	sort.SliceStable(e.actions, func(i, j int) bool { return e.actions[i].at < e.actions[j].at })
	// Replay the actions on a shadow of the fault state to find the phases.
	blocked := 0
	down := make([]bool, len(e.nodes))
	ndown := 0
	faulty := false
	cur := phaseSpan{name: "healthy"}
	for i := 0; i < len(e.actions); {
		at := e.actions[i].at
		hold := false
		for ; i < len(e.actions) && e.actions[i].at == at; i++ {
			a := e.actions[i]
			hold = a.hold
			switch a.kind {
			case actPartition, actCut:
				blocked++
			case actHeal:
				blocked = 0
			case actCrash, actStop, actPause:
				for _, n := range a.nodes {
					if !down[n] {
						down[n] = true
						ndown++
					}
				}
			case actRestart, actResume:
				for _, n := range a.nodes {
					if down[n] {
						down[n] = false
						ndown--
					}
				}
			}
		}
		f := blocked > 0 || ndown > 0 || hold
		if f == faulty {
			continue
		}
		faulty = f
		if at > cur.from {
			cur.to = at
			e.phases = append(e.phases, cur)
		}
		cur = phaseSpan{name: "partitioned", from: at}
		if !f {
			cur.name = "healed"
		}
	}
	cur.to = e.end
	if cur.to > cur.from || len(e.phases) == 0 {
		e.phases = append(e.phases, cur)
	}
	return nil
}

// groups resolves partition groups; the PoPs not named form one more group.
func (e *engine) groups(gs [][]string) [][]int32 {
	var out [][]int32
	named := map[int32]bool{}
	for _, g := range gs {
		ps := e.popsOf(g)
		for _, p := range ps {
			named[p] = true
		}
		out = append(out, ps)
	}
	var rest []int32
	for i := range e.pops {
		if !named[int32(i)] {
			rest = append(rest, int32(i))
		}
	}
	if len(rest) > 0 {
		out = append(out, rest)
	}
	return out
}

// actAt handles the event of action i at t. A heal takes effect at once,
// except between the regions Options.Reconnects gives a delay for: those
// links stay blocked that much longer, unless a partition or cut comes in
// between.
func (e *engine) actAt(ev event, t int64) {
	a := e.actions[ev.i]
	if a.kind != actHeal {
		e.act(a, t)
		return
	}
	if ev.node == deferredHeal {
		if e.lastBlock <= a.at {
			r := e.opts.Reconnects[ev.from]
			e.setBlocked(e.regionPoPs(r.From), e.regionPoPs(r.To), false)
		}
		return
	}
	var later []int
	for i, r := range e.opts.Reconnects {
		if int64(r.At) == a.at && r.After > 0 {
			later = append(later, i)
		}
	}
	if len(later) == 0 {
		e.act(a, t)
		return
	}
	was := make([][]bool, len(e.blocked))
	for x := range e.blocked {
		was[x] = slices.Clone(e.blocked[x])
	}
	e.act(a, t)
	for _, i := range later {
		r := e.opts.Reconnects[i]
		for _, x := range e.regionPoPs(r.From) {
			for _, y := range e.regionPoPs(r.To) {
				if was[x][y] {
					e.block(x, y)
				}
			}
		}
		e.q.push(event{at: t + int64(r.After), kind: evAction, i: ev.i, node: deferredHeal, from: int32(i)})
	}
}

// deferredHeal marks the event of a heal's links that reconnect late.
const deferredHeal = -2

// regionPoPs returns the PoPs of the region named region.
func (e *engine) regionPoPs(region string) []int32 {
	var out []int32
	for i, p := range e.pops {
		if p.id.Region == region {
			out = append(out, int32(i))
		}
	}
	return out
}

// setBlocked blocks (or unblocks) every link from a PoP of xs to one of ys.
func (e *engine) setBlocked(xs, ys []int32, blocked bool) {
	for _, x := range xs {
		for _, y := range ys {
			switch {
			case blocked:
				e.block(x, y)
			case e.blocked[x][y]:
				e.blocked[x][y] = false
				e.nBlock--
			}
		}
	}
}

// act applies a scenario action at t.
func (e *engine) act(a action, t int64) {
	switch a.kind {
	case actPartition, actCut:
		e.lastBlock = t
	}
	switch a.kind {
	case actPartition:
		for gi, g := range a.groups {
			for gj, h := range a.groups {
				if gi == gj {
					continue
				}
				for _, x := range g {
					for _, y := range h {
						e.block(x, y)
					}
				}
			}
		}
	case actCut:
		for _, x := range a.groups[0] {
			for _, y := range a.groups[1] {
				if x != y {
					e.block(x, y)
				}
			}
		}
	case actHeal:
		for x := range e.blocked {
			clear(e.blocked[x])
		}
		e.nBlock = 0
	case actSkew:
		for _, n := range a.nodes {
			e.nodes[n].skew = a.offset
		}
	case actCrash:
		var now []int32 // their members are told at once
		for _, n := range a.nodes {
			if !e.crash(e.nodes[n], t) {
				now = append(now, n)
			}
		}
		e.popsChanged(now, t)
		e.reroute()
	case actStop:
		for _, n := range a.nodes {
			if nd := e.nodes[n]; nd.up {
				e.stop(nd, t)
			}
		}
		e.reroute()
	case actRestart:
		for _, n := range a.nodes {
			nd := e.nodes[n]
			if nd.up {
				e.crash(nd, t) // its former incarnation may linger
			}
			if err := e.start(nd, t); err != nil {
				e.err = err
				return
			}
			e.joinSync(nd, t)
		}
		e.popsChanged(a.nodes, t)
		e.reroute()
	case actPause:
		var now []int32
		for _, n := range a.nodes {
			if nd := e.nodes[n]; nd.up && !nd.paused {
				if !e.leave(nd, t) {
					now = append(now, n)
				}
				nd.paused = true
			}
		}
		e.popsChanged(now, t)
		e.reroute()
	case actResume:
		var resumed []int32
		for _, n := range a.nodes {
			nd := e.nodes[n]
			if !nd.up || !nd.paused {
				continue
			}
			nd.paused = false
			p := &e.pops[nd.pop]
			p.gone = slices.DeleteFunc(p.gone, func(g goneMember) bool { return g.node == nd.idx && g.inc == nd.inc })
			p.live = append(p.live, nd.idx)
			sort.Slice(p.live, func(i, j int) bool { return p.live[i] < p.live[j] })
			nd.nextCore = -1
			nd.core.Tick(e.nodeNow(nd, t))
			e.drain(nd, t)
			resumed = append(resumed, n)
		}
		for _, n := range resumed {
			e.joinSync(e.nodes[n], t)
		}
		e.popsChanged(resumed, t)
		e.reroute()
	}
}

// leave takes nd, crashed or paused at t, out of its PoP's live members.
// With failure detection (replication.failure_detection, or the node's
// entry in Options.Detections) the others go on listing it until they
// notice, then are told; leave reports whether that is so (else the caller
// tells them at once).
func (e *engine) leave(nd *simNode, t int64) bool {
	p := &e.pops[nd.pop]
	for i, x := range p.live {
		if x == nd.idx {
			p.live = append(p.live[:i], p.live[i+1:]...)
			break
		}
	}
	d := e.detection(nd.name, t)
	if d <= 0 {
		return false
	}
	if len(p.live) == 0 {
		// No member is left to list the gone ones: memberlist's view died
		// with them, and a node that starts next knows none of them.
		p.gone = p.gone[:0]
		return true
	}
	p.gone = append(p.gone, goneMember{node: nd.idx, inc: nd.inc, name: repl.MemberName(nd.n.Link().Self()), until: t + d})
	if k := [2]int64{int64(nd.pop), t + d}; !e.detectQueued[k] {
		e.detectQueued[k] = true
		e.q.push(event{at: t + d, kind: evMembers, node: nd.pop})
	}
	return true
}

// detection is how long after t the members of node's PoP notice that it
// crashed or paused at t.
func (e *engine) detection(node string, t int64) int64 {
	for _, d := range e.opts.Detections {
		if d.Node == node && int64(d.At) == t && d.After > 0 {
			return int64(d.After)
		}
	}
	return int64(e.sc.Replication.FailureDetection)
}

func (e *engine) block(x, y int32) {
	if !e.blocked[x][y] {
		e.blocked[x][y] = true
		e.nBlock++
	}
}

// popsChanged tells the members of the PoPs of nodes that membership changed.
func (e *engine) popsChanged(nodes []int32, t int64) {
	done := map[int32]bool{}
	for _, n := range nodes {
		if p := e.nodes[n].pop; !done[p] {
			done[p] = true
			e.membersChanged(p, t)
		}
	}
}

// crash stops nd at t and reports whether its PoP's members are told later
// (see leave).
func (e *engine) crash(nd *simNode, t int64) bool {
	if !nd.up {
		return false
	}
	later := true // paused: out of live already, told or queued then
	if nd.paused {
		nd.paused = false
	} else {
		later = e.leave(nd, t)
	}
	nd.up, nd.n, nd.core = false, nil, nil
	return later
}

// stop stops nd cleanly at t: its last flush and its goodbye go out, and
// its PoP's members are told at once (memberlist's leave), before the next
// node of an event stops: the last of a PoP says the PoP goes down. A
// paused node crashes.
func (e *engine) stop(nd *simNode, t int64) {
	if nd.paused {
		e.crash(nd, t)
		e.popsChanged([]int32{nd.idx}, t)
		return
	}
	now := e.nodeNow(nd, t)
	nd.core.Flush(now)
	nd.core.Goodbye(now)
	e.drain(nd, t)
	p := &e.pops[nd.pop]
	p.live = slices.DeleteFunc(p.live, func(x int32) bool { return x == nd.idx })
	nd.up, nd.n, nd.core = false, nil, nil
	e.membersChanged(nd.pop, t)
}

func (e *engine) reroute() {
	for _, s := range e.sources {
		s.route(e.popUp)
	}
}
