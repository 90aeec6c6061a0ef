package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// linkModel is a resolved Link, in nanoseconds.
type linkModel struct {
	latency, jitter, reorderDelay int64
	loss, dup, reorder            float64
}

// sortEntries puts d's entries in (rule, key, window) order. The store
// yields them in hash order, and its hash is seeded per store, so sorting
// is what makes message sizes and chunking the same run after run.
func sortEntries(d *wire.Delta) {
	slices.SortFunc(d.Entries, func(a, b crdt.Entry) int {
		if c := strings.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Window, b.Window)
	})
}

// encode encodes d as the transport would (at most maxBytes per message)
// and returns the deltas as the receivers decode them, their sizes, and the
// bytes sent. The two slices are the engine's, valid until the next call.
func (e *engine) encode(d *wire.Delta, maxBytes int) ([]*wire.Delta, []uint32, uint64) {
	msgs, err := wire.Encode(d, maxBytes)
	if err != nil {
		e.err = fmt.Errorf("sim: encode: %w", err)
		return nil, nil, 0
	}
	var size uint64
	sizes := e.sizesBuf[:0]
	for _, m := range msgs {
		size += uint64(len(m))
		sizes = append(sizes, uint32(len(m)))
	}
	e.sizesBuf = sizes
	parts := e.partsBuf[:0]
	if len(msgs) == 1 {
		e.partsBuf = append(parts, d)
		return e.partsBuf, sizes, size
	}
	for range msgs {
		parts = append(parts, nil)
	}
	e.partsBuf = parts
	for i, m := range msgs {
		if parts[i], err = wire.Decode(m); err != nil {
			e.err = fmt.Errorf("sim: decode: %w", err)
			return nil, nil, 0
		}
	}
	return parts, sizes, size
}

// send puts one message from nd to node to on the network: dropped if the
// link is cut or the message lost, else delivered after the link's latency
// and jitter (plus the reorder delay, sometimes), sometimes twice.
func (e *engine) send(nd *simNode, to int32, d *wire.Delta, size uint32, link uint8, msg repl.Kind, from int32, t int64) {
	dst := e.nodes[to]
	e.transmit(nd.pop, dst.pop, event{kind: evDeliver, node: to, inc: dst.inc, from: from, link: link, msg: msg, size: size, d: d}, t)
}

// sendPoP puts one message from nd on the network to every node of PoP to:
// what a NATS publish does between PoPs. The PoP's nodes sit together, so
// the link's loss, delay and duplication apply to the PoP as a whole, and
// one event delivers to every node live at its arrival.
func (e *engine) sendPoP(nd *simNode, to int32, d *wire.Delta, size uint32, link repl.Link, msg repl.Kind, from int32, t int64) {
	if e.gwLost != nil && e.gatewayLost(nd, to, t) {
		return
	}
	e.transmit(nd.pop, to, event{kind: evDeliverPoP, node: to, from: from, link: uint8(link), msg: msg, size: size, d: d}, t)
}

// gwLoss is a span [from, until) in which a node's messages to region to
// are lost (Options.GatewayLosses).
type gwLoss struct {
	to          string
	from, until int64
}

// gatewayLost reports whether nd's gateway to PoP to's region is down at t.
func (e *engine) gatewayLost(nd *simNode, to int32, t int64) bool {
	for _, g := range e.gwLost[nd.idx] {
		if t >= g.from && t < g.until && e.pops[to].id.Region == g.to {
			return true
		}
	}
	return false
}

// transmit queues ev over the link from PoP fp to PoP tp at t: dropped if
// the link is cut or the message lost, else delivered after the link's
// latency and jitter (plus the reorder delay, sometimes), sometimes twice.
func (e *engine) transmit(fp, tp int32, ev event, t int64) {
	if e.nBlock > 0 && e.blocked[fp][tp] {
		return
	}
	l := &e.links[fp][tp]
	if l.loss > 0 && e.nrng.Float64() < l.loss {
		return
	}
	copies := 1
	if l.dup > 0 && e.nrng.Float64() < l.dup {
		copies = 2
	}
	for range copies {
		delay := l.latency
		if l.jitter > 0 {
			delay += e.nrng.Int64N(l.jitter)
		}
		if l.reorder > 0 && e.nrng.Float64() < l.reorder {
			delay += l.reorderDelay
		}
		ev.at = t + delay
		e.q.push(ev)
	}
}
