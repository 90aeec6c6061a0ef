package sim

import (
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

type evKind uint8

const (
	evDeliver    evKind = iota // a message reaches a node
	evDeliverPoP               // a message reaches every node of a PoP
	evCore                     // a node's replication core has timed work
	evTick                     // a node's housekeeping
	evAction                   // a scenario action (partition, heal, crash, ...)
	evChange                   // a traffic stream's rate or shares change
	evPhase                    // a phase begins
	evRuleSample               // admitted/limit samples of one rule's keys
	evSeries                   // a time-series row
	evConverge                 // a convergence probe after a heal
	evProgress                 // progress report
	evRelease                  // a request of a concurrency rule ends (concurrency.go)
	evMembers                  // a PoP's members drop a crashed or paused node (failure detection)
	evState                    // a node writes its state file (state.nodes)
)

// event is one entry of the queue. Node events carry the incarnation they
// were scheduled for, so that a crashed or restarted node ignores them.
type event struct {
	at   int64
	seq  uint64
	kind evKind
	link uint8 // link of a delivery: a repl.Link or linkJoin
	msg  repl.Kind
	node int32 // the node of a node event; the phase of a rule sample (-1: run)
	from int32 // sending PoP of a delivery; change index of a traffic change
	i    int   // action, stream, phase, rule or probe index
	inc  uint64
	size uint32 // encoded size of a delivery
	d    *wire.Delta
}

// queue is the event queue: a 4-ary min-heap ordered by time, ties broken
// by the order of scheduling (seq), so that runs are deterministic. It is
// typed (rather than container/heap over an interface) so that pushing an
// event allocates nothing. A large run holds millions of deliveries in
// flight; four children per node halve the levels a pop walks down, and
// the four sit side by side (four adjacent lines, whose loads overlap).
type queue struct {
	h   []event
	seq uint64
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func (q *queue) push(ev event) {
	q.seq++
	ev.seq = q.seq
	q.h = append(q.h, ev)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !ev.before(&q.h[p]) {
			break
		}
		q.h[i] = q.h[p]
		i = p
	}
	q.h[i] = ev
}

// peek returns the time of the next event, or never when the queue is empty.
func (q *queue) peek() int64 {
	if len(q.h) == 0 {
		return never
	}
	return q.h[0].at
}

// pop removes and returns the earliest event; the queue must not be empty.
func (q *queue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	last := q.h[n]
	q.h[n] = event{}
	q.h = q.h[:n]
	if n > 0 {
		i := 0
		for {
			c := 4*i + 1
			if c >= n {
				break
			}
			for k := c + 1; k < min(c+4, n); k++ {
				if q.h[k].before(&q.h[c]) {
					c = k
				}
			}
			if !q.h[c].before(&last) {
				break
			}
			q.h[i] = q.h[c]
			i = c
		}
		q.h[i] = last
	}
	return top
}

const never = int64(1<<63 - 1)
