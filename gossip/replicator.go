package gossip

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// Options configure a Replicator.
type Options struct {
	// Node is the core whose counts are replicated. Required.
	Node *pop.Node
	// Clock reads the time; nil means clock.Real{}.
	Clock clock.Clock
	// FlushInterval is how often changed counts are sent; 0 means 50ms.
	FlushInterval time.Duration
	// AntiEntropyInterval is how often all own live counts are re-sent;
	// 0 means 5s.
	AntiEntropyInterval time.Duration
	// PeerTimeout is how long a remote PoP may stay silent before it counts
	// as partitioned; 0 means 2s.
	PeerTimeout time.Duration
	// HeartbeatInterval is how often a heartbeat is published to other PoPs;
	// 0 means PeerTimeout/4.
	HeartbeatInterval time.Duration
	// PoP connects the transport to the own PoP's other nodes (memberlist);
	// nil for a PoP of one node.
	PoP Connect
	// Global connects the transport to other PoPs (NATS); nil for a
	// deployment of one PoP.
	Global Connect
	// ExpectedPoPs are remote PoPs known in advance: they count as
	// partitioned until first heard. Others appear when first heard.
	ExpectedPoPs []PoPID
	// MaxBatchEntries is the batch size cap: when this many keys changed
	// since the last flush, the Replicator flushes without waiting for
	// FlushInterval. 0 means 32768.
	MaxBatchEntries int
	// QueueSize bounds received messages waiting to be applied; when full,
	// new ones are dropped and counted (anti-entropy repairs them). 0 means 4096.
	QueueSize int
	// OnPartitionChange, if set, is called from the Replicator's goroutine
	// (after the node core's SetUnheard, which the Replicator always calls)
	// with the remote PoPs counted as partitioned (sorted; nil for none)
	// at the first check and whenever that set changes, checked every
	// HeartbeatInterval. It must not block.
	OnPartitionChange func(partitioned []PoPID)
	// ObserveLag, if set, is called for every received message with the
	// transport's name and the receive time minus the sender's flush time.
	// It must be cheap and safe for concurrent use (a Prometheus histogram).
	ObserveLag func(transport string, lag time.Duration)
	// Logger receives replication events; nil discards them.
	Logger *slog.Logger
}

// DefaultOptions returns the default intervals; set Node and transports.
func DefaultOptions() Options {
	return Options{
		FlushInterval:       50 * time.Millisecond,
		AntiEntropyInterval: 5 * time.Second,
		PeerTimeout:         2 * time.Second,
		MaxBatchEntries:     32768,
		QueueSize:           4096,
	}
}

func (o *Options) setDefaults() error {
	d := DefaultOptions()
	if o.Node == nil {
		return errors.New("gossip: options: node is required")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = d.FlushInterval
	}
	if o.AntiEntropyInterval == 0 {
		o.AntiEntropyInterval = d.AntiEntropyInterval
	}
	if o.PeerTimeout == 0 {
		o.PeerTimeout = d.PeerTimeout
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = o.PeerTimeout / 4
	}
	if o.QueueSize == 0 {
		o.QueueSize = d.QueueSize
	}
	if o.MaxBatchEntries == 0 {
		o.MaxBatchEntries = d.MaxBatchEntries
	}
	switch {
	case o.FlushInterval < time.Millisecond:
		return fmt.Errorf("gossip: options: flush interval %s below 1ms", o.FlushInterval)
	case o.AntiEntropyInterval < o.FlushInterval:
		return fmt.Errorf("gossip: options: anti-entropy interval %s below flush interval %s", o.AntiEntropyInterval, o.FlushInterval)
	case o.HeartbeatInterval <= 0 || o.HeartbeatInterval >= o.PeerTimeout:
		return fmt.Errorf("gossip: options: heartbeat interval %s must be positive and below peer timeout %s", o.HeartbeatInterval, o.PeerTimeout)
	case o.QueueSize < 1:
		return fmt.Errorf("gossip: options: queue size %d below 1", o.QueueSize)
	case o.MaxBatchEntries < 1:
		return fmt.Errorf("gossip: options: max batch entries %d below 1", o.MaxBatchEntries)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Replicator runs a Node's replication: every FlushInterval it sends the
// node's changed counts (pop-scope ones to the own PoP, global ones to the
// own PoP and every other PoP), applies what arrives, re-sends all own live
// counts every AntiEntropyInterval and whenever a peer joins, a connection
// comes back or a silent PoP is heard again, and tracks which remote PoPs are
// heard. It owns its goroutines; Close stops them. Safe for concurrent use.
type Replicator struct {
	opts Options
	node *pop.Node
	self crdt.Replica
	clk  clock.Clock
	log  *slog.Logger

	popT, globT Transport
	tstats      [2]transportCounters // 0: pop, 1: global

	queue  chan inbound
	resync chan struct{} // wakes the loop for the work in resyncWant
	// resyncWant is a set of want* bits: where to resend own live counts,
	// and whether to ask the other PoPs for theirs first.
	resyncWant atomic.Uint32
	relay      chan struct{} // relay state to the PoPs in relayPending
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
	once       sync.Once

	lastPartitioned []PoPID // the loop's last report to OnPartitionChange
	reported        bool    // whether there was a first report

	mu    sync.Mutex // guards peers and lastBeat
	peers map[PoPID]*peerState
	// lastBeat is the SentAt of the last heartbeat of each remote replica:
	// a gap of more than two heartbeat intervals means messages were lost.
	lastBeat map[crdt.Replica]int64
	// relayPending are the PoPs to relay their own replicas' counts to.
	relayPending map[PoPID]bool
	resyncs      atomic.Uint64
	flushes      atomic.Uint64
}

type inbound struct {
	t    int // 0 pop, 1 global
	from PoPID
	kind Kind
	data []byte
}

type peerState struct {
	lastHeard int64 // unix nanos; 0 = never
	down      bool  // reported as partitioned by the loop
}

const (
	tPoP    = 0
	tGlobal = 1
)

// Start connects the transports and starts replicating. The Replicator stops
// when ctx is done or Close is called; Close also waits for it.
func Start(ctx context.Context, opts Options) (*Replicator, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	self := opts.Node.Self()
	r := &Replicator{
		opts:         opts,
		node:         opts.Node,
		self:         self,
		clk:          opts.Clock,
		log:          opts.Logger,
		queue:        make(chan inbound, opts.QueueSize),
		resync:       make(chan struct{}, 1),
		stop:         make(chan struct{}),
		peers:        map[PoPID]*peerState{},
		lastBeat:     map[crdt.Replica]int64{},
		relay:        make(chan struct{}, 1),
		relayPending: map[PoPID]bool{},
	}
	for _, p := range opts.ExpectedPoPs {
		if p != r.selfPoP() {
			r.peers[p] = &peerState{}
		}
	}
	var err error
	if opts.PoP != nil {
		if r.popT, err = opts.PoP(&handler{r: r, t: tPoP}); err != nil {
			r.shutdown()
			return nil, fmt.Errorf("gossip: pop transport: %w", err)
		}
		r.tstats[tPoP].name = r.popT.Name()
	}
	if opts.Global != nil {
		if r.globT, err = opts.Global(&handler{r: r, t: tGlobal}); err != nil {
			r.shutdown()
			return nil, fmt.Errorf("gossip: global transport: %w", err)
		}
		r.tstats[tGlobal].name = r.globT.Name()
	}
	// Messages that arrived meanwhile wait in the queue.
	r.wg.Add(2)
	go r.work()
	go r.loop(ctx)
	return r, nil
}

func (r *Replicator) selfPoP() PoPID { return PoPID{Region: r.self.Region, PoP: r.self.PoP} }

// Close sends a last flush, stops the goroutines and closes the transports.
// It is idempotent. Call it even after the context is done: that stops the
// goroutines, but only Close releases the transports.
func (r *Replicator) Close() error {
	var err error
	r.once.Do(func() {
		r.halt()
		r.wg.Wait()
		err = r.closeTransports()
	})
	return err
}

func (r *Replicator) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

// shutdown is Close for a Replicator whose loop has not started.
func (r *Replicator) shutdown() {
	r.once.Do(func() {
		r.halt()
		_ = r.closeTransports()
		r.wg.Wait()
	})
}

func (r *Replicator) closeTransports() error {
	var errs []error
	for _, t := range []Transport{r.globT, r.popT} {
		if t != nil {
			errs = append(errs, t.Close())
		}
	}
	return errors.Join(errs...)
}

func (r *Replicator) loop(ctx context.Context) {
	defer r.wg.Done()
	flush := time.NewTicker(r.opts.FlushInterval)
	defer flush.Stop()
	// Between flushes, look whether a batch reached its size cap.
	full := time.NewTicker(min(max(r.opts.FlushInterval/5, time.Millisecond), 10*time.Millisecond))
	defer full.Stop()
	ae := time.NewTicker(r.opts.AntiEntropyInterval)
	defer ae.Stop()
	var hbC <-chan time.Time
	if r.globT != nil {
		hb := time.NewTicker(r.opts.HeartbeatInterval)
		defer hb.Stop()
		hbC = hb.C
		r.heartbeat()
	}
	for {
		select {
		case <-ctx.Done():
			r.flush()
			r.halt()
			return
		case <-r.stop:
			r.flush()
			return
		case <-flush.C:
			r.flush()
		case <-full.C:
			if r.node.Pending() >= r.opts.MaxBatchEntries {
				r.flush()
				flush.Reset(r.opts.FlushInterval)
			}
		case <-ae.C:
			r.antiEntropy()
		case <-r.resync:
			want := r.resyncWant.Swap(0)
			if want == 0 {
				continue
			}
			r.resyncs.Add(1)
			if want&wantSync != 0 {
				r.publishEmpty(KindSync)
			}
			r.sendAntiEntropy(want&wantPoP != 0, want&(wantGlobal|wantSync) != 0)
		case <-r.relay:
			r.relayState()
		case <-hbC:
			r.heartbeat()
			r.checkPeers()
			r.reportPartitions()
		}
	}
}

// Flush sends the node's changed counts now, without waiting for the timer.
func (r *Replicator) Flush() { r.flush() }

func (r *Replicator) flush() {
	r.flushes.Add(1)
	r.send(r.node.Flush(r.clk.Now()), false)
}

func (r *Replicator) antiEntropy() { r.sendAntiEntropy(true, true) }

// sendAntiEntropy sends all own live counts to the own PoP and/or the other
// PoPs.
func (r *Replicator) sendAntiEntropy(toPoP, toGlobal bool) {
	out := r.node.AntiEntropy(r.clk.Now())
	for i := range out {
		o := &out[i]
		if toPoP && r.popT != nil {
			r.publish(tPoP, r.popT, KindDelta, &o.Delta, true)
		}
		if toGlobal && r.globT != nil && o.Scope == pop.ScopeGlobal {
			r.publish(tGlobal, r.globT, KindDelta, &o.Delta, true)
		}
	}
}

// Bits of resyncWant.
const (
	wantPoP    = 1 << iota // resend own counts to the own PoP
	wantGlobal             // resend own counts to the other PoPs
	wantSync               // ask the other PoPs for theirs, then resend own
)

// want schedules resync work for the loop. It does not block.
func (r *Replicator) want(bits uint32) {
	r.resyncWant.Or(bits)
	select {
	case r.resync <- struct{}{}:
	default:
	}
}

// Resync asks for all own live counts to be re-sent soon, to the own PoP and
// to the others. It does not block.
func (r *Replicator) Resync() { r.want(wantPoP | wantGlobal) }

func (r *Replicator) send(out []pop.Outbound, reliable bool) {
	for i := range out {
		o := &out[i]
		if r.popT != nil && (o.Scope == pop.ScopePoP || o.Scope == pop.ScopeGlobal) {
			r.publish(tPoP, r.popT, KindDelta, &o.Delta, reliable)
		}
		if r.globT != nil && o.Scope == pop.ScopeGlobal {
			r.publish(tGlobal, r.globT, KindDelta, &o.Delta, reliable)
		}
	}
}

func (r *Replicator) publish(ti int, t Transport, kind Kind, d *crdt.Delta, reliable bool) {
	c := &r.tstats[ti]
	if !reliable && bulky(d, t.MaxPayload(false)) {
		// Many datagrams in a burst are likely to be dropped: send a big
		// batch over the stream transport, where there is one.
		reliable = true
	}
	msgs, err := crdt.Encode(d, t.MaxPayload(reliable))
	if err != nil {
		c.sendErrors.Add(1)
		r.log.Error("gossip: encode delta", "transport", t.Name(), "err", err)
		return
	}
	for _, m := range msgs {
		if err := t.Publish(kind, m, reliable); err != nil {
			c.sendErrors.Add(1)
			r.log.Debug("gossip: publish", "transport", t.Name(), "err", err)
			continue
		}
		c.msgsSent.Add(1)
		c.bytesSent.Add(uint64(len(m)))
	}
	if kind == KindDelta {
		c.entriesSent.Add(uint64(len(d.Entries)))
	}
}

// bulkyPackets is how many best-effort messages one batch may take before it
// goes over the reliable transport instead.
const bulkyPackets = 8

// bulky reports whether d's entries take more than bulkyPackets messages of
// maxPayload bytes (an estimate: key plus at most 8 bytes per entry).
func bulky(d *crdt.Delta, maxPayload int) bool {
	size, limit := 0, bulkyPackets*maxPayload
	for i := range d.Entries {
		if size += len(d.Entries[i].Key) + 8; size > limit {
			return true
		}
	}
	return false
}

func (r *Replicator) heartbeat() { r.publishEmpty(KindHeartbeat) }

// publishEmpty publishes a delta without entries (a heartbeat or a sync
// request) to the other PoPs.
func (r *Replicator) publishEmpty(kind Kind) {
	if r.globT == nil {
		return
	}
	d := crdt.Delta{Sender: r.self, SentAt: r.clk.Now()}
	r.publish(tGlobal, r.globT, kind, &d, false)
}

// checkPeers logs the PoPs that went silent.
func (r *Replicator) checkPeers() {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, p := range r.peers {
		if !p.down && now-p.lastHeard > int64(r.opts.PeerTimeout) {
			p.down = true
			r.log.Warn("gossip: remote pop unheard", "pop", id.String(), "timeout", r.opts.PeerTimeout)
		}
	}
}

// reportPartitions calls OnPartitionChange when the partitioned set changed.
func (r *Replicator) reportPartitions() {
	p := r.Partitioned()
	if r.reported && slices.Equal(p, r.lastPartitioned) {
		return
	}
	r.lastPartitioned, r.reported = p, true
	// The node core's share policy limits this side while PoPs are unheard.
	// A PoP leaves the set only once something from it has arrived, and the
	// node holds its shares a little longer while the rest of its counts come.
	unheard := make([]string, len(p))
	for i, id := range p {
		unheard[i] = id.String()
	}
	r.opts.Node.SetUnheard(r.opts.Clock.Now(), unheard)
	if r.opts.OnPartitionChange != nil {
		r.opts.OnPartitionChange(slices.Clone(p))
	}
}

// handler is the Handler a Replicator gives one of its transports.
type handler struct {
	r *Replicator
	t int
}

// Receive copies b onto the receive queue, or drops it when the queue is full.
func (h *handler) Receive(from PoPID, kind Kind, b []byte) {
	c := &h.r.tstats[h.t]
	c.msgsRecv.Add(1)
	c.bytesRecv.Add(uint64(len(b)))
	select {
	case h.r.queue <- inbound{t: h.t, from: from, kind: kind, data: slices.Clone(b)}:
	default:
		c.dropped.Add(1)
	}
}

// Resync resends the own counts; after a (re)connect to the other PoPs it
// first asks them to resend theirs.
func (h *handler) Resync() {
	if h.t == tGlobal {
		h.r.requestSync()
		return
	}
	h.r.want(wantPoP) // a member joined: it alone needs the counts
}

func (h *handler) LocalState() []byte { return h.r.localState() }

func (h *handler) MergeState(b []byte) { h.r.mergeState(b) }

func (r *Replicator) work() {
	defer r.wg.Done()
	dec := crdt.NewDecoder()
	var d crdt.Delta
	for {
		select {
		case <-r.stop:
			return
		case in := <-r.queue:
			r.apply(dec, &d, in)
		}
	}
}

// apply decodes and applies one received message. Garbage is counted, never
// fatal.
func (r *Replicator) apply(dec *crdt.Decoder, d *crdt.Delta, in inbound) {
	c := &r.tstats[in.t]
	if err := dec.Decode(in.data, d); err != nil {
		c.decodeErrors.Add(1)
		r.log.Debug("gossip: decode", "transport", c.name, "from", in.from.String(), "err", err)
		return
	}
	if d.Sender.Region != in.from.Region || d.Sender.PoP != in.from.PoP {
		// Not the PoP whose subject (or gossip pool) it came through: forged
		// or misrouted. Its entries are dropped.
		c.forged.Add(1)
		c.rejected.Add(uint64(len(d.Entries)))
		r.log.Debug("gossip: sender not of its pop", "transport", c.name, "from", in.from.String(), "sender", d.Sender.String())
		return
	}
	now := r.clk.Now()
	if d.SentAt > 0 {
		lag := time.Duration(now - d.SentAt)
		c.observeLag(lag)
		if r.opts.ObserveLag != nil {
			r.opts.ObserveLag(c.name, lag)
		}
	}
	if in.t == tGlobal && in.kind != KindState {
		r.heard(in.from, now)
		if in.kind == KindHeartbeat && r.missedBeats(d.Sender, d.SentAt, now) {
			// A short cut (under PeerTimeout) lost messages: repair now
			// rather than at the next anti-entropy round.
			r.requestSync()
		}
	}
	if in.kind == KindSync {
		r.want(wantGlobal)
		r.queueRelay(in.from)
		return
	}
	if in.kind == KindHeartbeat || len(d.Entries) == 0 {
		return
	}
	via := pop.ScopePoP
	if in.t == tGlobal {
		via = pop.ScopeGlobal // KindState too: only global rules leave a PoP
	}
	st := r.node.Apply(now, d, via)
	c.entriesRecv.Add(uint64(len(d.Entries)))
	c.rejected.Add(uint64(st.Rejected()))
}

// heard records a message from remote PoP p at now. A PoP heard for the
// first time or again after a silence gets all own live counts at once, and
// is asked for its own.
func (r *Replicator) heard(p PoPID, now int64) {
	r.mu.Lock()
	ps := r.peers[p]
	resync := false
	if ps == nil {
		ps = &peerState{}
		r.peers[p] = ps
		resync = true
		r.log.Info("gossip: remote pop heard", "pop", p.String())
	} else if ps.lastHeard == 0 || now-ps.lastHeard > int64(r.opts.PeerTimeout) || ps.down {
		resync = true
		if ps.down {
			r.log.Info("gossip: remote pop heard again", "pop", p.String())
		}
	}
	ps.down = false
	if now > ps.lastHeard {
		ps.lastHeard = now
	}
	r.mu.Unlock()
	if resync {
		// Ask for theirs too: links come back one direction at a time, and
		// what the other side sent when it heard us first may have been lost.
		r.requestSync()
		r.queueRelay(p)
	}
}

// maxBeatReplicas bounds lastBeat; beyond it, replicas silent for long are
// forgotten.
const maxBeatReplicas = 4096

// missedBeats records a heartbeat of sender sent at sentAt (the sender's
// clock) and reports whether heartbeats in between went missing.
func (r *Replicator) missedBeats(sender crdt.Replica, sentAt, now int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.lastBeat[sender]
	if ok && sentAt <= prev {
		return false // duplicate or reordered
	}
	if !ok && len(r.lastBeat) >= maxBeatReplicas {
		for rep, t := range r.lastBeat {
			if now-t > int64(10*r.opts.PeerTimeout) {
				delete(r.lastBeat, rep)
			}
		}
		if len(r.lastBeat) >= maxBeatReplicas {
			return false
		}
	}
	r.lastBeat[sender] = sentAt
	return ok && sentAt-prev > int64(2*r.opts.HeartbeatInterval)
}

// queueRelay schedules relaying what this node holds of PoP p's replicas to
// p: on p's sync request and when p is heard first or again (a restarted
// node may be there, and its sync request may have gone out before its
// links were up). Requests that arrive before the loop gets to them are
// relayed once.
func (r *Replicator) queueRelay(p PoPID) {
	if _, ok := r.globT.(Relayer); !ok {
		return
	}
	r.mu.Lock()
	r.relayPending[p] = true
	r.mu.Unlock()
	select {
	case r.relay <- struct{}{}:
	default:
	}
}

// relayState sends each pending PoP the counts this node holds of that
// PoP's own replicas: a restarted node of a PoP without other members gets
// back what its former incarnation counted.
func (r *Replicator) relayState() {
	rl, ok := r.globT.(Relayer)
	if !ok {
		return
	}
	r.mu.Lock()
	pending := r.relayPending
	r.relayPending = map[PoPID]bool{}
	r.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	c := &r.tstats[tGlobal]
	for _, d := range r.node.State(r.clk.Now()) {
		p := PoPID{Region: d.Sender.Region, PoP: d.Sender.PoP}
		if !pending[p] || p == r.selfPoP() {
			continue
		}
		// Only global counts ever leave a PoP (the others could not have
		// arrived here; this keeps it so whatever State holds).
		d.Entries = slices.DeleteFunc(d.Entries, func(e crdt.Entry) bool {
			rule, ok := r.node.Rule(e.Rule)
			return !ok || rule.Scope != pop.ScopeGlobal
		})
		if len(d.Entries) == 0 {
			continue
		}
		msgs, err := crdt.Encode(&d, r.globT.MaxPayload(true))
		if err != nil {
			c.sendErrors.Add(1)
			continue
		}
		for _, m := range msgs {
			if err := rl.Relay(p, m); err != nil {
				c.sendErrors.Add(1)
				continue
			}
			c.msgsSent.Add(1)
			c.bytesSent.Add(uint64(len(m)))
		}
		c.entriesSent.Add(uint64(len(d.Entries)))
	}
}

// requestSync asks the other PoPs to resend their live counts, then resends
// the own to them. It does not block.
func (r *Replicator) requestSync() { r.want(wantSync) }

// maxStateBytes caps a LocalState (memberlist refuses push/pull state over 20 MB).
const maxStateBytes = 16 << 20

// localState frames every live count this node holds as length-prefixed
// encoded deltas.
func (r *Replicator) localState() []byte {
	var out []byte
	for _, d := range r.node.State(r.clk.Now()) {
		msgs, err := crdt.Encode(&d, crdt.MaxDeltaBytes)
		if err != nil {
			r.log.Error("gossip: encode state", "err", err)
			continue
		}
		for _, m := range msgs {
			if len(out)+len(m)+binary.MaxVarintLen64 > maxStateBytes {
				return out
			}
			out = binary.AppendUvarint(out, uint64(len(m)))
			out = append(out, m...)
		}
	}
	return out
}

// mergeState applies a peer's localState: counts of the own PoP's replicas
// through the PoP scope, others' through the global scope.
func (r *Replicator) mergeState(b []byte) {
	dec := crdt.NewDecoder()
	var d crdt.Delta
	now := r.clk.Now()
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			r.tstats[tPoP].decodeErrors.Add(1)
			return
		}
		m := b[k : k+int(n)]
		b = b[k+int(n):]
		if err := dec.Decode(m, &d); err != nil {
			r.tstats[tPoP].decodeErrors.Add(1)
			continue
		}
		via := pop.ScopeGlobal
		if d.Sender.SamePoP(r.self) {
			via = pop.ScopePoP
		}
		st := r.node.Apply(now, &d, via)
		r.tstats[tPoP].rejected.Add(uint64(st.Rejected()))
		r.tstats[tPoP].stateEntries.Add(uint64(len(d.Entries)))
	}
}
