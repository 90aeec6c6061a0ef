package sim

import (
	"container/heap"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

type evKind uint8

const (
	evDeliver     evKind = iota // a message reaches a node
	evFlush                     // a node flushes its changed counts
	evAntiEntropy               // a node re-sends its own live counts
	evTick                      // a node's housekeeping
	evHeartbeat                 // a node publishes a heartbeat and checks whom it hears
	evAction                    // a scenario action (partition, heal, crash, ...)
	evChange                    // a traffic stream's rate or shares change
	evPhase                     // a phase begins
	evRuleSample                // admitted/limit samples of one rule's keys
	evSeries                    // a time-series row
	evConverge                  // a convergence probe after a heal
	evProgress                  // progress report
)

// event is one entry of the queue. Node events carry the incarnation they
// were scheduled for, so that a crashed or restarted node ignores them.
type event struct {
	at   int64
	seq  uint64
	kind evKind
	via  pop.Scope
	node int32
	from int32 // sending PoP of a delivery
	i    int   // action, stream, phase, rule or probe index
	inc  uint64
	d    *crdt.Delta // nil for a heartbeat
}

// queue is the event queue: a binary heap ordered by time, ties broken by
// the order of scheduling (seq), so that runs are deterministic.
type queue struct {
	h   evHeap
	seq uint64
}

type evHeap []event

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h evHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

// Push and Pop are for container/heap only; they move events by value
// through the interface, which costs one small allocation per push.
func (h *evHeap) Push(x any) { *h = append(*h, x.(event)) }
func (h *evHeap) Pop() any {
	old := *h
	n := len(old) - 1
	ev := old[n]
	old[n] = event{}
	*h = old[:n]
	return ev
}

func (q *queue) push(ev event) {
	q.seq++
	ev.seq = q.seq
	heap.Push(&q.h, ev)
}

// peek returns the time of the next event, or never when the queue is empty.
func (q *queue) peek() int64 {
	if len(q.h) == 0 {
		return never
	}
	return q.h[0].at
}

func (q *queue) pop() event { return heap.Pop(&q.h).(event) }

const never = int64(1<<63 - 1)
