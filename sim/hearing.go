package sim

import "sort"

// Which remote PoPs a node hears, kept in one place.
//
// A node hears a remote PoP when it receives anything from one of its nodes:
// a delta or a heartbeat (every node publishes one every heartbeat_interval).
// A PoP silent for longer than peer_timeout is unheard (partitioned, or all
// its nodes down), checked at each of the node's heartbeats. When an unheard
// PoP is heard again the node re-sends its own live counts at once
// (anti-entropy on reconnect), and every change of the unheard set is handed
// to the node core through unheardSetter when it has one (the share policy).

// unheardSetter is implemented by a node core whose rules adapt to
// partitions (on_partition: share). pops are "region/pop" names, sorted; an
// empty list means every PoP is heard. It is told every change, whatever the
// rules' policies, as the daemon does.
type unheardSetter interface {
	SetUnheard(now int64, pops []string)
}

// resetHearing starts nd hearing every PoP as of t (a fresh node gives its
// peers peer_timeout to be heard).
func (e *engine) resetHearing(nd *simNode, t int64) {
	nd.lastHeard = make([]int64, len(e.pops))
	nd.unheard = make([]bool, len(e.pops))
	for i := range nd.lastHeard {
		nd.lastHeard[i] = t
	}
}

// heard records that nd received a message from PoP p at t.
func (e *engine) heard(nd *simNode, p int32, t int64) {
	nd.lastHeard[p] = t
	if !nd.unheard[p] {
		return
	}
	nd.unheard[p] = false
	e.hearingChanged(nd, t)
	// Reconnect: teach the PoP heard again what it missed.
	e.broadcast(nd, nd.n.AntiEntropy(e.nodeNow(nd, t)), t, true)
}

// checkHearing marks the PoPs nd has not heard for peer_timeout as unheard.
func (e *engine) checkHearing(nd *simNode, t int64) {
	changed := false
	for p := range e.pops {
		if int32(p) == nd.pop || nd.unheard[p] {
			continue
		}
		if t-nd.lastHeard[p] > e.peerTimeout {
			nd.unheard[p] = true
			changed = true
		}
	}
	if changed {
		e.hearingChanged(nd, t)
	}
}

// unheardPoPs returns nd's unheard PoPs as sorted "region/pop" names.
func (e *engine) unheardPoPs(nd *simNode) []string {
	var out []string
	for p, u := range nd.unheard {
		if u {
			out = append(out, e.pops[p].id)
		}
	}
	sort.Strings(out)
	return out
}

// hearingChanged tells nd's core which PoPs it does not hear now.
func (e *engine) hearingChanged(nd *simNode, t int64) {
	if s, ok := any(nd.n).(unheardSetter); ok {
		s.SetUnheard(e.nodeNow(nd, t), e.unheardPoPs(nd))
	}
}
