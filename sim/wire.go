package sim

import (
	"fmt"
	"slices"

	"github.com/geolimit/geolimit/repl"
)

// The simulator runs the daemon's replication protocol (package repl) as it
// is: every node has a repl.Core, ticked at the time the core asks for
// (Next), stepped with every message that reaches the node, and told its
// PoP's membership whenever a member starts, and when one crashes or pauses
// once failure detection has noticed (replication.failure_detection; until
// then the others go on listing it). What a core makes ready goes on the
// simulated network: LinkPoP messages to the other live members of the PoP (memberlist, one
// message each), LinkGlobal messages to every other PoP (one NATS publish;
// each PoP's nodes get it together; with region voices a PoP's totals and
// heartbeats to its region's PoPs, and its sync requests to those and to
// the nodes of other regions that speak for theirs), KindState to the
// nodes of the PoP it is relayed to.

// linkJoin marks a delivery of a member's push/pull state on join.
const linkJoin = 0xff

// newCore returns the replication core of node nd.
func (e *engine) newCore(nd *simNode, t int64) (*repl.Core, error) {
	c, err := repl.New(repl.Config{
		Settings:   e.settingsOf(nd),
		Node:       nd.n.Link(),
		PoPLink:    len(e.pops[nd.pop].nodes) > 1,
		GlobalLink: len(e.pops) > 1,
		Relay:      true,
		PhaseSeed:  e.storeSeed ^ uint64(nd.pop+1)*0x9e3779b97f4a7c15, // one per PoP
		ColdStart:  t == 0,
	})
	if err != nil {
		return nil, fmt.Errorf("sim: node %s: %w", nd.name, err)
	}
	return c, nil
}

// settingsOf returns the replication settings of node nd: the scenario's,
// with every other PoP of the topology known in advance unless it names
// them.
func (e *engine) settingsOf(nd *simNode) repl.Settings {
	settings := e.sc.Replication.Settings
	if len(settings.ExpectedPoPs) == 0 {
		for i, p := range e.pops {
			if int32(i) != nd.pop {
				settings.ExpectedPoPs = append(settings.ExpectedPoPs, p.id.String())
			}
		}
	}
	return settings
}

// membersChanged gives every live member of PoP p its view of the others.
func (e *engine) membersChanged(p int32, t int64) {
	pp := &e.pops[p]
	pp.gone = slices.DeleteFunc(pp.gone, func(g goneMember) bool { return g.until <= t })
	live := pp.live
	names := make([]string, len(live), len(live)+len(pp.gone))
	for i, m := range live {
		names[i] = repl.MemberName(e.nodes[m].n.Link().Self())
	}
	for _, g := range pp.gone {
		names = append(names, g.name) // not noticed yet
	}
	for i, m := range live {
		nd := e.nodes[m]
		others := make([]string, 0, len(names)-1)
		others = append(others, names[:i]...)
		others = append(others, names[i+1:]...)
		nd.core.SetMembers(e.nodeNow(nd, t), others)
		e.drain(nd, t)
	}
}

// drain sends what nd's core made ready and schedules its next tick.
func (e *engine) drain(nd *simNode, t int64) {
	for _, m := range nd.core.Ready() {
		e.route(nd, &m, t)
	}
	next := nd.core.Next()
	if next == 0 {
		return
	}
	at := max(next-e.epoch-nd.skew, t)
	if at != nd.nextCore {
		nd.nextCore = at
		e.q.push(event{at: at, kind: evCore, node: nd.idx, inc: nd.inc})
	}
}

// route puts one message of nd on the network.
func (e *engine) route(nd *simNode, m *repl.Message, t int64) {
	p := &e.pops[nd.pop]
	sortEntries(m.Delta)
	switch {
	case m.Link == repl.LinkPoP:
		if len(p.live) < 2 {
			return
		}
		parts, sizes, size := e.encode(m.Delta, e.intraMax)
		for _, to := range p.live {
			if to == nd.idx {
				continue
			}
			p.acct.messages += uint64(len(parts))
			p.acct.bytes += size
			for i, part := range parts {
				e.send(nd, to, part, sizes[i], uint8(repl.LinkPoP), m.Kind, nd.pop, t)
			}
		}
	default:
		// Between PoPs: one publish, delivered to each PoP reached; relayed
		// state reaches only the PoP it is for.
		targets, from := e.otherPoPs(nd.pop), nd.pop
		if m.Link == repl.LinkGlobal && (m.Kind == repl.KindDelta || m.Kind == repl.KindHeartbeat) && nd.core.RegionVoices() {
			// A PoP's totals and heartbeats: the PoPs of its region only
			// subscribe (the region's heartbeat turns go on LinkRegion).
			targets = e.regionMates(nd.pop)
		}
		if m.Link == repl.LinkGlobal && m.Kind == repl.KindSync && nd.core.RegionVoices() {
			// A sync request: the PoPs of its region, and of the other
			// regions those whose nodes speak for theirs subscribe
			// (gossip.NATS.SpeakForRegion; each node is looked at again
			// on arrival).
			targets = e.syncTargets(nd.pop)
		}
		if m.Kind == repl.KindState {
			to, ok := e.popIndex[m.To]
			if !ok {
				return
			}
			targets = []int32{to}
		}
		if len(targets) == 0 {
			return
		}
		parts, sizes, size := e.encode(m.Delta, e.interMax)
		p.acct.messages += uint64(len(parts))
		p.acct.bytes += size
		p.global.messages += uint64(len(parts))
		p.global.bytes += size
		for _, to := range targets {
			if len(e.pops[to].live) == 0 {
				continue
			}
			for i, part := range parts {
				e.sendPoP(nd, to, part, sizes[i], m.Link, m.Kind, from, t)
			}
		}
	}
}

// syncTargets returns the PoPs a sync request of PoP p reaches with region
// voices: the other PoPs of its region, and those of other regions with a
// live node whose PoP speaks for its region (hears every region's sync
// requests). The slice is reused by the next call.
func (e *engine) syncTargets(p int32) []int32 {
	out := e.syncTo[:0]
	for _, q := range e.otherPoPs(p) {
		if e.pops[q].regionIdx == e.pops[p].regionIdx || e.popSpeaks(q) {
			out = append(out, q)
		}
	}
	e.syncTo = out
	return out
}

// popSpeaks reports whether a live node of PoP q speaks for its region.
func (e *engine) popSpeaks(q int32) bool {
	for _, m := range e.pops[q].live {
		if e.nodes[m].speaks() {
			return true
		}
	}
	return false
}

// speaks reports whether nd hears other regions' sync requests: without
// region voices every node does, with them a node whose PoP speaks for its
// region.
func (nd *simNode) speaks() bool {
	if !nd.core.RegionVoices() {
		return true
	}
	voice, _ := nd.core.RegionVoice()
	return voice
}

// otherPoPs returns the indexes of every PoP but p, memoised.
func (e *engine) otherPoPs(p int32) []int32 {
	if e.others == nil {
		e.others = make([][]int32, len(e.pops))
		for a := range e.pops {
			for b := range e.pops {
				if a != b {
					e.others[a] = append(e.others[a], int32(b))
				}
			}
		}
	}
	return e.others[p]
}

// regionMates returns the indexes of the other PoPs of p's region, memoised.
func (e *engine) regionMates(p int32) []int32 {
	if e.mates == nil {
		e.mates = make([][]int32, len(e.pops))
		for a := range e.pops {
			for b := range e.pops {
				if a != b && e.pops[a].regionIdx == e.pops[b].regionIdx {
					e.mates[a] = append(e.mates[a], int32(b))
				}
			}
		}
	}
	return e.mates[p]
}

// deliver hands a message that reached nd to its core.
func (e *engine) deliver(nd *simNode, ev *event, t int64) {
	now := e.nodeNow(nd, t)
	switch ev.link {
	case linkJoin:
		nd.core.MergeState(now, ev.d)
	default:
		if ev.link == uint8(repl.LinkGlobal) || ev.link == uint8(repl.LinkRegion) {
			e.inbound.messages++
			by := &e.inboundBy[ev.link-uint8(repl.LinkGlobal)][ev.msg&3]
			by.messages++
			by.bytes += uint64(ev.size)
			if ev.msg == repl.KindDelta || ev.msg == repl.KindState {
				// Counts only: heartbeats' rule fingerprints and sync
				// requests' control entries are bytes, not entries.
				e.inbound.entries += uint64(len(ev.d.Entries))
				by.entries += uint64(len(ev.d.Entries))
				if e.pops[ev.from].regionIdx != e.pops[nd.pop].regionIdx {
					e.inboundFar.messages++
					e.inboundFar.entries += uint64(len(ev.d.Entries))
				}
			}
			e.inbound.bytes += uint64(ev.size)
		}
		p := &e.pops[ev.from]
		nd.core.Step(now, repl.Message{
			Link: repl.Link(ev.link), Kind: ev.msg,
			From:  p.id,
			Delta: ev.d,
		})
	}
	e.drain(nd, t)
}

// joinSync is memberlist's push/pull state sync on join: the first other
// live member of the PoP sends its LocalState.
func (e *engine) joinSync(nd *simNode, t int64) {
	for _, m := range e.pops[nd.pop].live {
		if m == nd.idx {
			continue
		}
		peer := e.nodes[m]
		for _, d := range peer.core.LocalState(e.nodeNow(peer, t)) {
			sortEntries(&d)
			parts, sizes, size := e.encode(&d, e.interMax)
			acct := &e.pops[peer.pop].acct
			acct.messages += uint64(len(parts))
			acct.bytes += size
			for i, part := range parts {
				e.send(peer, nd.idx, part, sizes[i], linkJoin, repl.KindDelta, peer.pop, t)
			}
		}
		return
	}
}
