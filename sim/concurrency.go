package sim

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/pop"
)

// Concurrency rules in the simulator.
//
// A stream of a concurrency rule has a hold time: each admitted request
// takes a slot (a pinned lease, as proxy mode's) and gives it back when
// hold has passed (an evRelease event). The oracle judges such a key with
// its trailing window set to the hold: the cost admitted in (t-hold, t]
// is exactly the slots in flight at t, so an admit is over the limit when
// more than the limit are in flight, and a reject wrong when the request
// would have fit. A node that crashes loses its leases with its requests;
// the oracle still counts them in flight until their hold ends, and the
// other nodes of the PoP stop counting them when the membership sees the
// node go or at the rule's lease_ttl.

// held is a lease to give back at the end of its request's hold.
type held struct {
	lease pop.Lease
	node  int32 // -1: the central node
	inc   uint64
}

// width is the trailing window the oracle judges rule ri's keys with:
// the rule's window, or a concurrency rule's hold.
func (e *engine) width(ri int) time.Duration {
	if e.rules[ri].Kind == pop.Concurrency {
		return e.holds[ri]
	}
	return e.rules[ri].Window
}

// ruleHolds returns each concurrency rule's hold, by rule index (0 for
// the others): every stream of one rule has the same (checkHolds).
func ruleHolds(sc *Scenario, rules []pop.Rule) []time.Duration {
	out := make([]time.Duration, len(rules))
	for i, r := range rules {
		for _, t := range sc.Traffic {
			if t.Rule == r.Name && t.Hold > 0 {
				out[i] = t.Hold
			}
		}
	}
	return out
}

// checkHolds checks that every stream of a concurrency rule has a hold,
// one per rule, and that no other stream has one.
func (sc *Scenario) checkHolds(rules map[string]pop.Rule) error {
	first := map[string]int{}
	for i, t := range sc.Traffic {
		conc := rules[t.Rule].Kind == pop.Concurrency
		switch {
		case !conc && t.Hold != 0:
			return fmt.Errorf("traffic[%d].hold: only a stream of a concurrency rule holds its requests", i)
		case conc && (t.Hold <= 0 || t.Hold > sc.Duration):
			return fmt.Errorf("traffic[%d].hold: a stream of concurrency rule %q needs a hold within the run, got %s", i, t.Rule, t.Hold)
		case !conc:
			continue
		}
		if j, ok := first[t.Rule]; ok && sc.Traffic[j].Hold != t.Hold {
			return fmt.Errorf("traffic[%d].hold: %s differs from traffic[%d]'s %s: the streams of rule %q share one hold", i, t.Hold, j, sc.Traffic[j].Hold, t.Rule)
		}
		if _, ok := first[t.Rule]; !ok {
			first[t.Rule] = i
		}
	}
	return nil
}

// acquire decides a request of key k of a concurrency rule at node n
// (index node, incarnation inc; -1 for the central node) at its time now
// (the run's time t), and schedules the release of the slot it takes.
func (e *engine) acquire(n *pop.Node, node int32, inc uint64, now int64, k *keyInfo, cost uint64, t int64) (pop.Decision, error) {
	h, ok := n.Handle(k.ruleName)
	if !ok {
		return pop.Decision{}, pop.ErrUnknownRule
	}
	var res pop.Result
	if err := n.DecideCheck(now, pop.Check{Rule: h, Key: k.key, Cost: cost, Pin: true}, &res); err != nil {
		return pop.Decision{}, err
	}
	if res.Lease.Held() {
		i := len(e.held)
		if f := len(e.freeHeld); f > 0 {
			i = e.freeHeld[f-1]
			e.freeHeld = e.freeHeld[:f-1]
			e.held[i] = held{lease: res.Lease, node: node, inc: inc}
		} else {
			e.held = append(e.held, held{lease: res.Lease, node: node, inc: inc})
		}
		e.q.push(event{at: t + int64(e.holds[k.rule]), kind: evRelease, i: i})
	}
	return res.Decision, nil
}

// release gives back the lease of ev (its request's hold is over), unless
// its node crashed meanwhile.
func (e *engine) release(ev event) {
	h := e.held[ev.i]
	e.held[ev.i] = held{}
	e.freeHeld = append(e.freeHeld, ev.i)
	if h.node < 0 {
		e.central.Release(e.epoch+ev.at, h.lease.ID())
		return
	}
	nd := e.nodes[h.node]
	if !nd.up || nd.inc != h.inc {
		return
	}
	nd.n.Release(e.fleetNow(nd, ev.at), h.lease.ID())
	if e.flushNow {
		nd.core.Flush(e.nodeNow(nd, ev.at))
		e.drain(nd, ev.at)
	}
}
