package sim

import (
	"slices"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// Which remote PoPs a node hears, and what it does about it, kept in one
// place. The rules are those of the daemon's replicator (package gossip):
//
//   - Every node publishes a heartbeat to the other PoPs at start and every
//     heartbeat_interval. A node hears a remote PoP when any message of the
//     global transport arrives from it (a delta, a heartbeat or a sync
//     request; relayed state does not count).
//   - Every PoP of the topology is expected: it counts as unheard until first
//     heard, and again after peer_timeout of silence.
//   - A PoP heard for the first time or again after a silence, and a
//     heartbeat gap of more than two intervals from one sender (a cut shorter
//     than peer_timeout), make the node request a sync: it publishes a sync
//     request to the other PoPs and re-sends all its own live counts.
//   - A node that receives a sync request re-sends all its own live counts,
//     and (at most once per peer_timeout per requester) relays to the
//     requester's PoP what it holds of that PoP's own replicas, so that a
//     restarted node whose PoP has no other member gets back what its former
//     incarnation counted.
//   - At every heartbeat tick the node computes its unheard set and, when it
//     changed (and at the first tick), hands it to the node core
//     (unheardSetter: the share policy).
//
// Requests to sync or re-send made at one instant are coalesced into one, as
// the replicator's one-slot channels do.

// unheardSetter is implemented by a node core whose rules adapt to
// partitions (on_partition: share). pops are "region/pop" names, sorted; an
// empty list means every PoP is heard. It is told every change, whatever the
// rules' policies, as the daemon does.
type unheardSetter interface {
	SetUnheard(now int64, pops []string)
}

// Message kinds on the simulated wire.
const (
	msgDelta uint8 = iota
	msgHeartbeat
	msgSync
	msgState
)

// hearing is one node's view of the remote PoPs.
type hearing struct {
	lastHeard []int64 // per PoP index: sim time last heard, -1 never
	lastBeat  map[crdt.Replica]int64
	relayedAt map[crdt.Replica]int64
	relayTo   []bool // PoPs with a relay pending
	reported  []string
	reportedOnce,
	syncPending, resyncPending, relayPending bool
}

// resetHearing gives a (re)started node an empty view: every remote PoP
// expected and not yet heard.
func (e *engine) resetHearing(nd *simNode, t int64) {
	nd.h = hearing{
		lastHeard: make([]int64, len(e.pops)),
		lastBeat:  map[crdt.Replica]int64{},
		relayedAt: map[crdt.Replica]int64{},
		relayTo:   make([]bool, len(e.pops)),
	}
	for i := range nd.h.lastHeard {
		nd.h.lastHeard[i] = -1
	}
}

// receive handles the hearing side of a message from PoP from arriving at nd
// at t, and reports whether its entries are to be applied.
func (e *engine) receive(nd *simNode, from int32, msg uint8, d *crdt.Delta, t int64) bool {
	if from != nd.pop && msg != msgState {
		e.heard(nd, from, t)
		if msg == msgHeartbeat && e.missedBeats(nd, d.Sender, d.SentAt) {
			e.requestSync(nd, t)
		}
	}
	switch msg {
	case msgSync:
		e.resync(nd, t)
		e.queueRelay(nd, d.Sender, from, t)
		return false
	case msgHeartbeat:
		return false
	}
	return len(d.Entries) > 0
}

// heard records that nd heard PoP p at t; a PoP heard for the first time or
// again after a silence is asked to sync.
func (e *engine) heard(nd *simNode, p int32, t int64) {
	last := nd.h.lastHeard[p]
	if t > last {
		nd.h.lastHeard[p] = t
	}
	if last < 0 || t-last > e.peerTimeout {
		e.requestSync(nd, t)
	}
}

// missedBeats records a heartbeat of sender sent at sentAt (its clock) and
// reports whether heartbeats in between went missing.
func (e *engine) missedBeats(nd *simNode, sender crdt.Replica, sentAt int64) bool {
	prev, ok := nd.h.lastBeat[sender]
	if ok && sentAt <= prev {
		return false // duplicate or reordered
	}
	nd.h.lastBeat[sender] = sentAt
	return ok && sentAt-prev > 2*e.hbEvery
}

// requestSync makes nd ask the other PoPs for their counts and re-send its
// own, once per instant.
func (e *engine) requestSync(nd *simNode, t int64) {
	if !nd.h.syncPending {
		nd.h.syncPending = true
		e.q.push(event{at: t, kind: evSync, node: nd.idx, inc: nd.inc})
	}
}

// resync makes nd re-send its own live counts, once per instant.
func (e *engine) resync(nd *simNode, t int64) {
	if !nd.h.resyncPending {
		nd.h.resyncPending = true
		e.q.push(event{at: t, kind: evResync, node: nd.idx, inc: nd.inc})
	}
}

// queueRelay schedules relaying to PoP p what nd holds of p's replicas, for
// a sync request of sender, at most once per peer_timeout per sender.
func (e *engine) queueRelay(nd *simNode, sender crdt.Replica, p int32, t int64) {
	if at, ok := nd.h.relayedAt[sender]; ok && t-at < e.peerTimeout && t >= at {
		return
	}
	nd.h.relayedAt[sender] = t
	nd.h.relayTo[p] = true
	if !nd.h.relayPending {
		nd.h.relayPending = true
		e.q.push(event{at: t, kind: evRelay, node: nd.idx, inc: nd.inc})
	}
}

// doSync publishes nd's sync request and re-sends its own live counts.
func (e *engine) doSync(nd *simNode, t int64) {
	nd.h.syncPending = false
	e.publishEmpty(nd, msgSync, t)
	e.broadcast(nd, nd.n.AntiEntropy(e.nodeNow(nd, t)), t, msgDelta)
}

// doResync re-sends nd's own live counts.
func (e *engine) doResync(nd *simNode, t int64) {
	nd.h.resyncPending = false
	e.broadcast(nd, nd.n.AntiEntropy(e.nodeNow(nd, t)), t, msgDelta)
}

// doRelay sends each pending PoP the counts nd holds of that PoP's own
// replicas, to every node of that PoP (one publish per message).
func (e *engine) doRelay(nd *simNode, t int64) {
	nd.h.relayPending = false
	pending := nd.h.relayTo
	if !slices.Contains(pending, true) {
		return
	}
	nd.h.relayTo = make([]bool, len(e.pops))
	acct := &e.pops[nd.pop].acct
	for _, d := range nd.n.State(e.nodeNow(nd, t)) {
		p, ok := e.popIndex[d.Sender.Region+"/"+d.Sender.PoP]
		if !ok || !pending[p] {
			continue
		}
		sortEntries(&d)
		parts, size := e.encode(&d, e.interMax)
		acct.messages += uint64(len(parts))
		acct.bytes += size
		for _, m := range e.pops[p].live {
			for _, part := range parts {
				e.send(nd, m, part, pop.ScopeGlobal, msgState, t)
			}
		}
	}
}

// heartbeatTick publishes nd's heartbeat and reports its unheard set to the
// node core when it changed.
func (e *engine) heartbeatTick(nd *simNode, t int64) {
	e.publishEmpty(nd, msgHeartbeat, t)
	var unheard []string
	for p, last := range nd.h.lastHeard {
		if int32(p) != nd.pop && (last < 0 || t-last > e.peerTimeout) {
			unheard = append(unheard, e.pops[p].id)
		}
	}
	slices.Sort(unheard)
	if nd.h.reportedOnce && slices.Equal(unheard, nd.h.reported) {
		return
	}
	nd.h.reported, nd.h.reportedOnce = unheard, true
	if s, ok := any(nd.n).(unheardSetter); ok {
		s.SetUnheard(e.nodeNow(nd, t), unheard)
	}
}

// publishEmpty publishes a delta without entries (a heartbeat or a sync
// request) from nd to every node of the other PoPs.
func (e *engine) publishEmpty(nd *simNode, msg uint8, t int64) {
	if len(e.pops) == 1 {
		return
	}
	d := &crdt.Delta{Sender: nd.n.Self(), SentAt: e.nodeNow(nd, t)}
	p := &e.pops[nd.pop]
	p.acct.messages++
	p.acct.bytes += nd.hbSize
	for qi := range e.pops {
		if int32(qi) == nd.pop {
			continue
		}
		for _, m := range e.pops[qi].live {
			e.send(nd, m, d, pop.ScopeGlobal, msg, t)
		}
	}
}
