// Package memhub is an in-memory network for tests of package gossip: a Hub
// hands out transports that behave like memberlist inside a PoP and like NATS
// between PoPs, and can drop, duplicate, delay, reorder and cut deliveries.
//
//	hub := memhub.New(seed)
//	defer hub.Close()
//	opts.PoP = hub.PoP(id, "ams-1")       // like gossip.MemberlistConnect
//	opts.Global = hub.Global(id, "ams-1") // like gossip.NATSConnect
//	hub.SetRegionVoices(true)             // route as NATSConfig.RegionVoices
//
// Production code never imports it.
package memhub

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/identity"
)

// Faults are the network faults a Hub injects into every delivery.
type Faults struct {
	// Drop is the probability (0-1) that a delivery is lost.
	Drop float64
	// Duplicate is the probability (0-1) that a delivery happens twice.
	Duplicate float64
	// MinDelay and MaxDelay bound each delivery's delay, drawn uniformly;
	// a spread between them reorders messages.
	MinDelay, MaxDelay time.Duration
}

// Hub is an in-memory network for tests. Endpoints made with PoP behave like
// memberlist (they reach the other nodes of their PoP and sync state on
// join); endpoints made with Global behave like NATS (they reach every node
// of every other PoP). The Hub can drop, duplicate, delay, reorder and cut
// deliveries between PoPs. Deliveries are asynchronous, from one goroutine.
// A Hub is safe for concurrent use; Close it when done.
type Hub struct {
	mu      sync.Mutex
	rng     *rand.Rand
	faults  Faults
	cut     map[[2]identity.PoPID]bool // from, to
	eps     map[*endpoint]bool
	q       deliveryHeap
	seq     uint64
	wake    chan struct{}
	done    chan struct{}
	stopped sync.WaitGroup
	closed  bool

	// regionVoices routes PoP totals and heartbeats (KindDelta and
	// KindHeartbeat between PoPs) to the sender's region only, as
	// gossip.NATS does with region voices on.
	regionVoices bool

	// pushPull is the interval of the periodic push/pull inside a PoP (0:
	// none; SetPushPull); pushPullAt is when the next one is due.
	pushPull   time.Duration
	pushPullAt time.Time
}

// New returns a Hub whose random faults are drawn from seed.
func New(seed uint64) *Hub {
	h := &Hub{
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cut:  map[[2]identity.PoPID]bool{},
		eps:  map[*endpoint]bool{},
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	h.stopped.Add(1)
	go h.run()
	return h
}

// SetFaults replaces the faults injected from now on.
func (h *Hub) SetFaults(f Faults) {
	h.mu.Lock()
	h.faults = f
	h.mu.Unlock()
}

// SetRegionVoices routes as gossip.NATS does with
// NATSConfig.RegionVoices: from now on a PoP's totals and heartbeats
// (gossip.KindDelta and gossip.KindHeartbeat between PoPs) reach only the
// PoPs of its region, and its sync requests the PoPs of its region and
// the nodes of other regions that speak for theirs
// (gossip.RegionSpeaker); region totals and the region's heartbeat turns
// (gossip.KindRegion) and relayed state reach every PoP as before.
func (h *Hub) SetRegionVoices(on bool) {
	h.mu.Lock()
	h.regionVoices = on
	h.mu.Unlock()
}

// SetPushPull makes each node of a PoP exchange its whole state with one
// other member of its PoP, drawn at random, every d (0: never; the
// default), as memberlist does every PushPullInterval beside its join:
// what the faults drop of the messages inside a PoP is repaired by the
// next push/pull, as with memberlist, where a reliable send may still fail
// (its queue full, the member slow).
func (h *Hub) SetPushPull(d time.Duration) {
	h.mu.Lock()
	h.pushPull, h.pushPullAt = d, time.Now().Add(d)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// pushPulls returns the pairs of endpoints of one PoP due to exchange
// their state at now, and schedules the next round. The caller holds h.mu.
func (h *Hub) pushPulls(now time.Time) [][2]*endpoint {
	if h.pushPull <= 0 || now.Before(h.pushPullAt) {
		return nil
	}
	h.pushPullAt = now.Add(h.pushPull)
	eps := make([]*endpoint, 0, len(h.eps))
	for ep := range h.eps {
		if ep.local {
			eps = append(eps, ep)
		}
	}
	slices.SortFunc(eps, func(a, b *endpoint) int { return cmpString(a.name, b.name) })
	var pairs [][2]*endpoint
	for _, ep := range eps {
		var mates []*endpoint
		for _, o := range eps {
			if o != ep && ep.reaches(o) {
				mates = append(mates, o)
			}
		}
		if len(mates) > 0 {
			pairs = append(pairs, [2]*endpoint{ep, mates[h.rng.IntN(len(mates))]})
		}
	}
	return pairs
}

// Cut stops deliveries from PoP a to PoP b and from b to a.
func (h *Hub) Cut(a, b identity.PoPID) {
	h.CutOneWay(a, b)
	h.CutOneWay(b, a)
}

// CutOneWay stops deliveries from PoP from to PoP to (an asymmetric partition).
func (h *Hub) CutOneWay(from, to identity.PoPID) {
	h.mu.Lock()
	h.cut[[2]identity.PoPID{from, to}] = true
	h.mu.Unlock()
}

// Heal restores every cut link.
func (h *Hub) Heal() {
	h.mu.Lock()
	clear(h.cut)
	h.mu.Unlock()
}

// Close stops the Hub's goroutine; pending deliveries are discarded.
func (h *Hub) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	h.stopped.Wait()
}

// PoP returns a gossip.Connect for a node called name of PoP self that
// reaches the other nodes of self, like memberlist.
func (h *Hub) PoP(self identity.PoPID, name string) gossip.Connect {
	return h.connect(self, name, true)
}

// Global returns a gossip.Connect for a node called name of PoP self that
// reaches the nodes of every other PoP, like NATS.
func (h *Hub) Global(self identity.PoPID, name string) gossip.Connect {
	return h.connect(self, name, false)
}

func (h *Hub) connect(self identity.PoPID, name string, local bool) gossip.Connect {
	return func(hd gossip.Handler) (gossip.Transport, error) {
		ep := &endpoint{hub: h, self: self, name: name, local: local, h: hd}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, gossip.ErrClosed
		}
		var peers []*endpoint
		for o := range h.eps {
			if ep.reaches(o) {
				peers = append(peers, o)
			}
		}
		h.eps[ep] = true
		h.mu.Unlock()
		if local && len(peers) > 0 {
			// Push/pull with one member, as memberlist does on join; the
			// others hear of the join.
			slices.SortFunc(peers, func(a, b *endpoint) int { return cmpString(a.name, b.name) })
			p := peers[0]
			if s := p.h.LocalState(); s != nil {
				hd.MergeState(s)
			}
			if s := hd.LocalState(); s != nil {
				p.h.MergeState(s)
			}
			for _, o := range peers {
				o.h.Resync()
			}
		}
		return ep, nil
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// publish delivers msg from endpoint from to every endpoint it reaches, or
// with a relay target only to that PoP's endpoints, as if from that PoP.
func (h *Hub) publish(from *endpoint, kind gossip.Kind, msg []byte, relayTo *identity.PoPID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	now := time.Now()
	for to := range h.eps {
		if to == from || !from.reaches(to) || h.cut[[2]identity.PoPID{from.self, to.self}] {
			continue
		}
		if h.regionVoices && !from.local && (kind == gossip.KindDelta || kind == gossip.KindHeartbeat) && to.self.Region != from.self.Region {
			continue
		}
		if h.regionVoices && !from.local && kind == gossip.KindSync && to.self.Region != from.self.Region && !to.speaks {
			continue // another region's: heard by the PoP that speaks for it
		}
		origin := from.self
		if relayTo != nil && to.self != *relayTo {
			continue
		}
		n := 1
		if h.rng.Float64() < h.faults.Drop {
			n = 0
		} else if h.rng.Float64() < h.faults.Duplicate {
			n = 2
		}
		for range n {
			d := h.faults.MinDelay
			if spread := h.faults.MaxDelay - h.faults.MinDelay; spread > 0 {
				d += time.Duration(h.rng.Int64N(int64(spread)))
			}
			h.seq++
			heap.Push(&h.q, &delivery{at: now.Add(d), seq: h.seq, from: origin, to: to, kind: kind, msg: slices.Clone(msg)})
		}
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *Hub) run() {
	defer h.stopped.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		h.mu.Lock()
		var due []*delivery
		now := time.Now()
		for len(h.q) > 0 && !h.q[0].at.After(now) {
			due = append(due, heap.Pop(&h.q).(*delivery))
		}
		pairs := h.pushPulls(now)
		wait := time.Hour
		if len(h.q) > 0 {
			wait = h.q[0].at.Sub(now)
		}
		if h.pushPull > 0 {
			wait = min(wait, h.pushPullAt.Sub(now))
		}
		h.mu.Unlock()
		for _, d := range due {
			if !d.to.isClosed() {
				d.to.h.Receive(d.from, d.kind, d.msg)
			}
		}
		for _, p := range pairs {
			if a, b := p[0], p[1]; !a.isClosed() && !b.isClosed() {
				if s := b.h.LocalState(); s != nil {
					a.h.MergeState(s)
				}
				if s := a.h.LocalState(); s != nil {
					b.h.MergeState(s)
				}
			}
		}
		timer.Reset(wait)
		select {
		case <-h.done:
			return
		case <-h.wake:
		case <-timer.C:
		}
	}
}

type delivery struct {
	at   time.Time
	seq  uint64
	from identity.PoPID
	to   *endpoint
	kind gossip.Kind
	msg  []byte
}

type deliveryHeap []*delivery

func (q deliveryHeap) Len() int { return len(q) }
func (q deliveryHeap) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q deliveryHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *deliveryHeap) Push(x any)   { *q = append(*q, x.(*delivery)) }
func (q *deliveryHeap) Pop() any {
	old := *q
	d := old[len(old)-1]
	*q = old[:len(old)-1]
	return d
}

// endpoint is one node's gossip.Transport on a Hub.
type endpoint struct {
	hub   *Hub
	self  identity.PoPID
	name  string
	local bool
	h     gossip.Handler
	// speaks: the node's PoP speaks for its region (SpeakForRegion);
	// guarded by hub.mu.
	speaks bool

	mu     sync.Mutex
	closed bool
}

// SpeakForRegion makes the endpoint hear other regions' sync requests
// (on) or not, as gossip.NATS does.
func (e *endpoint) SpeakForRegion(on bool) error {
	e.hub.mu.Lock()
	e.speaks = on
	e.hub.mu.Unlock()
	return nil
}

// MaxPayload is the largest message a Hub endpoint accepts.
const MaxPayload = 64 << 10

func (e *endpoint) reaches(o *endpoint) bool {
	if e.local != o.local {
		return false
	}
	if e.local {
		return e.self == o.self
	}
	return e.self != o.self
}

func (e *endpoint) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *endpoint) Name() string { return "hub" }

func (e *endpoint) Publish(kind gossip.Kind, msg []byte, reliable bool) error {
	if e.isClosed() {
		return gossip.ErrClosed
	}
	if len(msg) > MaxPayload {
		return gossip.ErrTooLarge
	}
	e.hub.publish(e, kind, msg, nil)
	return nil
}

// Relay delivers msg as gossip.KindState to the endpoints of PoP to (Global
// endpoints only).
func (e *endpoint) Relay(to identity.PoPID, msg []byte) error {
	if e.isClosed() {
		return gossip.ErrClosed
	}
	if e.local || to == e.self {
		return fmt.Errorf("memhub: cannot relay to %s", to)
	}
	if len(msg) > MaxPayload {
		return gossip.ErrTooLarge
	}
	e.hub.publish(e, gossip.KindState, msg, &to)
	return nil
}

func (e *endpoint) MaxPayload(bool) int { return MaxPayload }

func (e *endpoint) Members() []string {
	if !e.local {
		return nil
	}
	e.hub.mu.Lock()
	defer e.hub.mu.Unlock()
	out := []string{}
	for o := range e.hub.eps {
		if o != e && e.reaches(o) {
			out = append(out, o.name)
		}
	}
	slices.Sort(out)
	return out
}

func (e *endpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.hub.mu.Lock()
	delete(e.hub.eps, e)
	e.hub.mu.Unlock()
	return nil
}

var (
	_ gossip.Transport     = (*endpoint)(nil)
	_ gossip.Relayer       = (*endpoint)(nil)
	_ gossip.RegionSpeaker = (*endpoint)(nil)
)

// LocalName returns the name the endpoint's node goes by in Members.
func (e *endpoint) LocalName() string { return e.name }
