package sim

import (
	"fmt"
	"strconv"

	"github.com/geolimit/geolimit/pop"
)

// request decides one arrival of s at t at a node of the PoP it reaches,
// and at the central node, and judges both.
func (e *engine) request(s *source, t int64) {
	ki := s.pickKey(e.trng)
	k := s.keys[ki]
	p := s.pickPoP(e.trng, ki)
	if p < 0 {
		e.unserved++
		return
	}
	live := e.pops[p].live
	ni := live[0]
	if len(live) > 1 {
		ni = live[e.trng.IntN(len(live))]
	}
	nd := e.nodes[ni]
	var d pop.Decision
	var err error
	if e.rules[k.rule].Kind == pop.Concurrency {
		d, err = e.acquire(nd.n, nd.idx, nd.inc, e.fleetNow(nd, t), k, s.cost, t)
	} else {
		d, err = nd.n.Decide(e.fleetNow(nd, t), k.ruleName, k.key, s.cost)
	}
	if err != nil {
		e.err = fmt.Errorf("sim: decide %s/%s at %s: %w", k.ruleName, k.key, nd.name, err)
		return
	}
	e.fleet.judge(k, t, s.cost, d.Allowed)
	e.fleet.served(nd.region, d.Allowed)
	if e.central != nil {
		var cd pop.Decision
		if e.rules[k.rule].Kind == pop.Concurrency {
			cd, err = e.acquire(e.central, -1, 0, e.epoch+t, k, s.cost, t)
		} else {
			cd, err = e.central.Decide(e.epoch+t, k.ruleName, k.key, s.cost)
		}
		if err != nil {
			e.err = fmt.Errorf("sim: central decide: %w", err)
			return
		}
		e.cOracle.judge(k, t, s.cost, cd.Allowed)
		e.cOracle.served(nd.region, cd.Allowed)
		if cd.Allowed != d.Allowed {
			e.disagree++
		}
	}
	if e.flushNow && d.Allowed {
		nd.core.Flush(e.nodeNow(nd, t))
		e.drain(nd, t)
	}
	if e.log != nil {
		e.writeLog(nd, k, s.cost, d.Allowed, t)
	}
}

func (e *engine) writeLog(nd *simNode, k *keyInfo, cost uint64, ok bool, t int64) {
	b := e.logBuf[:0]
	b = strconv.AppendInt(b, t/1e6, 10)
	if frac := t % 1e6; frac != 0 {
		b = append(b, '.')
		f := strconv.AppendInt(nil, 1e6+frac, 10)
		b = append(b, f[1:]...)
	}
	p := &e.pops[nd.pop]
	b = append(b, ',')
	b = append(b, p.id.Region...)
	b = append(b, ',')
	b = append(b, p.id.PoP...)
	b = append(b, ',')
	b = append(b, nd.name...)
	b = append(b, ',')
	b = append(b, k.ruleName...)
	b = append(b, ',')
	b = append(b, k.key...)
	b = append(b, ',')
	b = strconv.AppendUint(b, cost, 10)
	if ok {
		b = append(b, ",1\n"...)
	} else {
		b = append(b, ",0\n"...)
	}
	e.logBuf = b
	if _, err := e.log.Write(b); err != nil && e.err == nil {
		e.err = fmt.Errorf("sim: log: %w", err)
	}
}
