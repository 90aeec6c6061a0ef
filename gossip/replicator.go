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
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// Options configure a Replicator.
type Options struct {
	// Node is the node core whose counts are replicated (a pop.Node's
	// Link). Required.
	Node repl.Node
	// Clock reads the time; nil means clock.Real{}.
	Clock clock.Clock
	// FleetClock, when set, is kept at Clock plus the Core's clock
	// correction (repl.Core.ClockCorrection: the fleet clock the PoPs agree
	// on from their measured offsets) after every call into the Core. Hand
	// it to whatever gives the node core time (decisions, its Tick); the
	// Core itself reads Clock.
	FleetClock *clock.Offset
	// Settings are the replication settings (see repl.Settings; start from
	// DefaultOptions). FlushInterval must be positive: the Replicator
	// flushes on a timer.
	repl.Settings
	// EpochWait is how long the first member by name of a PoP waits to learn
	// the PoP's epoch before it starts one; 0 means repl's default (two
	// flush intervals, within 10ms..1s).
	EpochWait time.Duration
	// PoP connects the transport to the own PoP's other nodes (memberlist);
	// nil for a PoP of one node.
	PoP Connect
	// Global connects the transport to other PoPs (NATS); nil for a
	// deployment of one PoP.
	Global Connect
	// QueueSize bounds received messages waiting to be applied; when full,
	// new ones are dropped and counted (anti-entropy repairs them). 0 means 4096.
	QueueSize int
	// QueueBytes bounds the bytes of the received messages waiting to be
	// applied, the same way. 0 means 32 MiB.
	QueueBytes int64
	// OnPartitionChange, if set, is called from the Replicator's goroutine
	// (after the node core's SetUnheard, which the Replicator always calls)
	// with the remote PoPs counted as partitioned (sorted; nil for none)
	// at the first check and whenever that set changes, checked every
	// HeartbeatInterval. It must not block.
	OnPartitionChange func(partitioned []identity.PoPID)
	// ObserveLag, if set, is called for every received message with the
	// transport's name and the receive time minus the sender's flush time.
	// It must be cheap and safe for concurrent use (a Prometheus histogram).
	ObserveLag func(transport string, lag time.Duration)
	// ObserveRegionLag, if set, is called instead of ObserveLag for what
	// arrives on the region link (Settings.RegionVoices: regions' totals
	// from their voices, and the modes and penalty blocks every PoP sends
	// to every PoP), the same way. A region total's lag does not include
	// the hop to its voice inside its region.
	ObserveRegionLag func(transport string, lag time.Duration)
	// Logger receives replication events; nil discards them.
	Logger *slog.Logger
}

// DefaultOptions returns the default intervals; set Node and transports.
func DefaultOptions() Options {
	return Options{
		Settings:   repl.DefaultSettings(),
		QueueSize:  4096,
		QueueBytes: 32 << 20,
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
		return errors.New("gossip: options: flush_interval 0 (at once) needs a caller that flushes after every decision; the Replicator flushes on a timer")
	}
	if err := o.Settings.Validate(); err != nil {
		return fmt.Errorf("gossip: options: %w", err)
	}
	o.Settings = o.Settings.WithDefaults()
	if o.QueueSize == 0 {
		o.QueueSize = d.QueueSize
	}
	if o.QueueSize < 1 {
		return fmt.Errorf("gossip: options: queue size %d below 1", o.QueueSize)
	}
	if o.QueueBytes == 0 {
		o.QueueBytes = d.QueueBytes
	}
	if o.QueueBytes < 1 {
		return fmt.Errorf("gossip: options: queue bytes %d below 1", o.QueueBytes)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// coreConfig is the protocol configuration the options describe.
func (o *Options) coreConfig() repl.Config {
	return repl.Config{
		Settings:   o.Settings,
		Node:       o.Node,
		EpochWait:  o.EpochWait,
		PoPLink:    o.PoP != nil,
		GlobalLink: o.Global != nil,
		Relay:      true,
	}
}

// Replicator runs a Node's replication: the protocol of package repl (one
// voice per PoP, heartbeats, sync, relay) around real transports. It owns
// its goroutines: one ticks the protocol, one decodes and applies what
// arrives. Close stops them. Safe for concurrent use.
type Replicator struct {
	opts Options
	node repl.Node
	self identity.Replica
	clk  clock.Clock
	log  *slog.Logger

	mu   sync.Mutex // guards core
	core *repl.Core
	// sendMu keeps the messages of one Ready in order on the wire.
	sendMu sync.Mutex

	popT, globT Transport
	tstats      [3]transportCounters // tPoP, tGlobal, tRegion

	queue       chan inbound
	queuedBytes atomic.Int64  // bytes of the messages in queue
	queuedPeak  atomic.Int64  // the most queuedBytes has been
	kick        chan struct{} // wakes the loop: a batch may be full, or events wait
	// events are the transports' notices (want* bits) for the loop: the
	// transports call their handlers with their own locks held, so the
	// handler only records them.
	events   atomic.Uint32
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	once     sync.Once

	partVersion uint64 // the loop's last report to OnPartitionChange
	// speaks is what the transport between PoPs was last told of whether
	// this node's PoP speaks for its region (RegionSpeaker); guarded by mu.
	speaks  bool
	synced  bool // the loop logged the end of the startup sync
	drift   driftLog
	resyncs atomic.Uint64
}

type inbound struct {
	t    int // tPoP, tGlobal or tRegion
	from identity.PoPID
	kind Kind
	data []byte
}

const (
	tPoP    = 0
	tGlobal = 1
	// tRegion counts the region totals (repl.LinkRegion) that travel on the
	// global transport (KindRegion).
	tRegion = 2
)

// Bits of Replicator.events.
const (
	evMemberJoined = 1 << iota // a member joined the PoP
	evReconnected              // the link to the other PoPs came back
)

// notify records transport events for the loop and wakes it. It does not
// block.
func (r *Replicator) notify(bits uint32) {
	r.events.Or(bits)
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Start connects the transports and starts replicating. The Replicator stops
// when ctx is done or Close is called; Close also waits for it.
func Start(ctx context.Context, opts Options) (*Replicator, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	core, err := repl.New(opts.coreConfig())
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	r := &Replicator{
		opts:  opts,
		node:  opts.Node,
		self:  opts.Node.Self(),
		clk:   opts.Clock,
		log:   opts.Logger,
		core:  core,
		queue: make(chan inbound, opts.QueueSize),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	if opts.PoP != nil {
		t, err := opts.PoP(&handler{r: r, t: tPoP})
		if err != nil {
			r.shutdown()
			return nil, fmt.Errorf("gossip: pop transport: %w", err)
		}
		r.sendMu.Lock()
		r.popT = t
		r.tstats[tPoP].name = t.Name()
		r.sendMu.Unlock()
		if ln, ok := t.(interface{ LocalName() string }); ok {
			r.mu.Lock()
			r.core.SetMemberName(ln.LocalName())
			r.mu.Unlock()
		}
	}
	if opts.Global != nil {
		t, err := opts.Global(&handler{r: r, t: tGlobal})
		if err != nil {
			r.shutdown()
			return nil, fmt.Errorf("gossip: global transport: %w", err)
		}
		r.sendMu.Lock()
		r.globT = t
		r.tstats[tGlobal].name = t.Name()
		r.tstats[tRegion].name = t.Name()
		r.sendMu.Unlock()
	}
	// Messages that arrived meanwhile wait in the queue.
	r.wg.Add(2)
	go r.work()
	go r.loop(ctx)
	return r, nil
}

// Close sends a last flush and a goodbye (repl.Core.Goodbye), stops the
// goroutines and closes the transports.
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

// with runs fn on the core under the lock and sends what it made ready.
func (r *Replicator) with(fn func(c *repl.Core, now int64)) {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.mu.Lock()
	fn(r.core, r.clk.Now())
	if f := r.opts.FleetClock; f != nil {
		f.Set(r.core.ClockCorrection())
	}
	out := r.core.Ready()
	voice, _ := r.core.RegionVoice()
	speak := voice != r.speaks
	r.mu.Unlock()
	if speak {
		r.speakForRegion(voice)
	}
	for i := range out {
		r.send(&out[i])
	}
}

// speakForRegion tells the transport between PoPs whether this node's PoP
// speaks for its region (RegionSpeaker); a failure is retried at the next
// step. Requires r.sendMu held.
func (r *Replicator) speakForRegion(voice bool) {
	rs, ok := r.globT.(RegionSpeaker)
	if !ok {
		return // none yet, or it hears every request anyway
	}
	if err := rs.SpeakForRegion(voice); err != nil {
		r.log.Warn("gossip: region voice: subscriptions not changed", "voice", voice, "err", err)
		return
	}
	r.mu.Lock()
	r.speaks = voice
	r.mu.Unlock()
}

// stopping is the core's last work when the Replicator stops (a clean
// stop: a crash runs nothing): a last flush, then a goodbye that tells the
// other PoPs this node is gone, not cut off (repl.Core.Goodbye).
func stopping(c *repl.Core, now int64) {
	c.Flush(now)
	c.Goodbye(now)
}

func (r *Replicator) loop(ctx context.Context) {
	defer r.wg.Done()
	// The core keeps its own deadlines; the loop wakes at the next one (flush
	// slots are aligned across the PoP's members, and the slot's speaker
	// waits only a tenth of the flush interval for the others' totals), and
	// at least every maxSleep to look whether a batch reached its size cap.
	maxSleep := min(max(r.opts.FlushInterval/5, time.Millisecond), 10*time.Millisecond)
	timer := time.NewTimer(maxSleep)
	defer timer.Stop()
	// Joins are notified (Resync); departures are seen by polling.
	members := time.NewTicker(min(r.opts.FlushInterval, 100*time.Millisecond))
	defer members.Stop()
	r.syncMembers()
	for {
		next := r.step()
		timer.Reset(max(min(time.Duration(next-r.clk.Now()), maxSleep), 0))
		select {
		case <-ctx.Done():
			r.with(stopping)
			r.halt()
			return
		case <-r.stop:
			r.with(stopping)
			return
		case <-timer.C:
		case <-r.kick:
			ev := r.events.Swap(0)
			if ev&evMemberJoined != 0 {
				r.resyncs.Add(1)
				r.syncMembers()
				r.with(func(c *repl.Core, now int64) { c.Resync(now) })
			}
			if ev&evReconnected != 0 {
				r.resyncs.Add(1)
				r.with(func(c *repl.Core, now int64) { c.Reconnected(now) })
			}
		case <-members.C:
			r.syncMembers()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// step ticks the core, reports a changed partition set and returns when
// the core next has timed work.
func (r *Replicator) step() int64 {
	var part []identity.PoPID
	var ver uint64
	var next int64
	var startup repl.StartupState
	var drift []repl.PeerDrift
	var driftVer uint64
	var driftChanged bool
	r.with(func(c *repl.Core, now int64) {
		c.Tick(now)
		part, ver = c.Partitioned()
		next = c.Next()
		if !r.synced {
			startup = c.Startup()
		}
		if driftChanged = c.DriftVersion() != r.drift.version; driftChanged {
			drift, driftVer = c.Drift()
		}
	})
	if driftChanged {
		r.logDrift(drift, driftVer)
	} else {
		r.drift.roll(r, r.clk.Now()) // says what a period left out, changes or not
	}
	if !r.synced && startup.Synced {
		r.synced = true
		r.logStartup(startup)
	}
	if ver != r.partVersion && ver != 0 {
		r.partVersion = ver
		if len(part) > 0 {
			r.log.Warn("gossip: remote pops unheard", "pops", fmt.Sprint(part), "timeout", r.opts.PeerTimeout)
		}
		if r.opts.OnPartitionChange != nil {
			if len(part) == 0 {
				part = nil
			}
			r.opts.OnPartitionChange(part)
		}
	}
	return next
}

// logStartup logs the end of the startup sync.
func (r *Replicator) logStartup(st repl.StartupState) {
	took := time.Duration(st.TookMS) * time.Millisecond
	switch {
	case r.opts.StartupSync <= 0:
	case !st.TimedOut:
		r.log.Info("gossip: startup sync complete: the pop's and the expected pops' counts are in", "took", took)
	case st.Unknown:
		r.log.Info("gossip: startup sync waited its whole bound: no expected pops, so which pops exist is unknown (replication.expected_pops)", "took", took)
	default:
		r.log.Warn("gossip: startup sync timed out; decisions may undercount what former incarnations admitted", "took", took,
			"waiting_pop", st.WaitingPoP, "unanswered", fmt.Sprint(st.Waiting))
	}
}

// syncMembers hands the PoP transport's membership view to the core.
func (r *Replicator) syncMembers() {
	if r.popT == nil {
		return
	}
	ms := r.popT.Members()
	r.with(func(c *repl.Core, now int64) { c.SetMembers(now, ms) })
}

// Flush sends the node's changed counts now, without waiting for the timer.
func (r *Replicator) Flush() { r.with(func(c *repl.Core, now int64) { c.Flush(now) }) }

// Resync asks for all own live counts to be re-sent now, to the own PoP and
// to the others.
func (r *Replicator) Resync() {
	r.resyncs.Add(1)
	r.with(func(c *repl.Core, now int64) { c.Resync(now) })
}

// send encodes one message of the core and hands it to its transport.
func (r *Replicator) send(m *repl.Message) {
	ti, t, kind := tGlobal, r.globT, m.Kind
	switch m.Link {
	case repl.LinkPoP:
		ti, t = tPoP, r.popT
	case repl.LinkRegion:
		ti, kind = tRegion, KindRegion // region.go
	}
	if t == nil {
		return
	}
	c := &r.tstats[ti]
	reliable := m.Reliable
	if !reliable && bulky(m.Delta, t.MaxPayload(false)) {
		// Many datagrams in a burst are likely to be dropped: send a big
		// batch over the stream transport, where there is one.
		reliable = true
	}
	msgs, err := wire.Encode(m.Delta, t.MaxPayload(reliable))
	if err != nil {
		c.sendErrors.Add(1)
		r.log.Error("gossip: encode delta", "transport", t.Name(), "err", err)
		return
	}
	var rl Relayer
	if m.Kind == KindState {
		var ok bool
		if rl, ok = t.(Relayer); !ok {
			return
		}
	}
	for _, b := range msgs {
		if rl != nil {
			err = rl.Relay(m.To, b)
		} else {
			err = t.Publish(kind, b, reliable)
		}
		if err != nil {
			c.sendErrors.Add(1)
			r.log.Debug("gossip: publish", "transport", t.Name(), "kind", kindName(kind), "err", err)
			continue
		}
		c.msgsSent.Add(1)
		c.bytesSent.Add(uint64(len(b)))
	}
	c.entriesSent.Add(uint64(len(m.Delta.Entries)))
}

// bulkyPackets is how many best-effort messages one batch may take before it
// goes over the reliable transport instead.
const bulkyPackets = 8

// bulky reports whether d's entries take more than bulkyPackets messages of
// maxPayload bytes (an estimate: key plus at most 8 bytes per entry, and
// the bound of every other section's items).
func bulky(d *wire.Delta, maxPayload int) bool {
	size, limit := d.SectionBytes(), bulkyPackets*maxPayload
	if size > limit {
		return true
	}
	for i := range d.Entries {
		if size += len(d.Entries[i].Key) + 8; size > limit {
			return true
		}
	}
	return false
}

// handler is the Handler a Replicator gives one of its transports.
type handler struct {
	r *Replicator
	t int
}

// Receive copies b onto the receive queue, or drops it when the queue is
// full (Options.QueueSize messages or Options.QueueBytes bytes): a flood
// costs at most QueueBytes of memory, returned once it is applied.
func (h *handler) Receive(from identity.PoPID, kind Kind, b []byte) {
	r := h.r
	ti := h.t
	if kind == KindRegion {
		if ti != tGlobal {
			return // region totals travel between PoPs only
		}
		ti = tRegion
	}
	c := &r.tstats[ti]
	c.msgsRecv.Add(1)
	c.bytesRecv.Add(uint64(len(b)))
	n := int64(len(b))
	q := r.queuedBytes.Add(n)
	if q > r.opts.QueueBytes {
		r.queuedBytes.Add(-n)
		c.dropped.Add(1)
		return
	}
	for p := r.queuedPeak.Load(); q > p && !r.queuedPeak.CompareAndSwap(p, q); p = r.queuedPeak.Load() {
	}
	select {
	case r.queue <- inbound{t: ti, from: from, kind: kind, data: slices.Clone(b)}:
	default:
		r.queuedBytes.Add(-n)
		c.dropped.Add(1)
	}
}

// Resync: a member joined the PoP (it gets this node's counts, and keys'
// owners are looked up again), or the link to the other PoPs came back (they
// are asked for their totals and get this PoP's).
func (h *handler) Resync() {
	if h.t == tGlobal {
		h.r.notify(evReconnected)
		return
	}
	h.r.notify(evMemberJoined)
}

func (h *handler) LocalState() []byte { return h.r.localState() }

func (h *handler) MergeState(b []byte) { h.r.mergeState(b) }

func (r *Replicator) work() {
	defer r.wg.Done()
	dec := wire.NewDecoder()
	var d wire.Delta
	for {
		select {
		case <-r.stop:
			return
		case in := <-r.queue:
			r.queuedBytes.Add(-int64(len(in.data)))
			r.apply(dec, &d, in)
		}
	}
}

// apply decodes one received message and steps the core with it. Garbage is
// counted, never fatal.
func (r *Replicator) apply(dec *wire.Decoder, d *wire.Delta, in inbound) {
	c := &r.tstats[in.t]
	if err := dec.Decode(in.data, d); err != nil {
		c.decodeErrors.Add(1)
		r.log.Debug("gossip: decode", "transport", c.name, "from", in.from.String(), "err", err)
		return
	}
	if d.Skipped > 0 {
		c.unknownSections.Add(uint64(d.Skipped))
	}
	link, kind, observe := repl.LinkGlobal, in.kind, r.opts.ObserveLag
	switch in.t {
	case tPoP:
		link = repl.LinkPoP
	case tRegion:
		link, kind, observe = repl.LinkRegion, KindDelta, r.opts.ObserveRegionLag
	}
	var res repl.StepResult
	r.with(func(core *repl.Core, now int64) {
		if d.SentAt > 0 {
			lag := time.Duration(now - d.SentAt)
			c.observeLag(lag)
			if observe != nil {
				observe(c.name, lag)
			}
		}
		res = core.Step(now, repl.Message{Link: link, Kind: kind, From: in.from, Delta: d})
	})
	if res.Forged {
		// Not of the PoP whose subject (or gossip pool) it came through:
		// forged or misrouted. Its entries are dropped.
		c.forged.Add(1)
		c.rejected.Add(uint64(len(d.Entries)))
		r.log.Debug("gossip: sender not of its pop", "transport", c.name, "from", in.from.String(), "sender", d.Sender.String())
		return
	}
	c.entriesRecv.Add(uint64(len(d.Entries)))
	c.rejected.Add(uint64(res.Applied.Rejected()))
	if r.opts.MaxBatchEntries > 0 && r.node.Pending() >= r.opts.MaxBatchEntries {
		r.notify(0)
	}
}

// maxStateBytes caps a LocalState (memberlist refuses push/pull state over 20 MB).
const maxStateBytes = 16 << 20

// localState frames every live count this node holds as length-prefixed
// encoded deltas.
func (r *Replicator) localState() []byte {
	var st []wire.Delta
	r.mu.Lock()
	st = r.core.LocalState(r.clk.Now())
	r.mu.Unlock()
	var out []byte
	for i := range st {
		msgs, err := wire.Encode(&st[i], wire.MaxDeltaBytes)
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

// mergeState applies a member's localState.
func (r *Replicator) mergeState(b []byte) {
	dec := wire.NewDecoder()
	var d wire.Delta
	c := &r.tstats[tPoP]
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			c.decodeErrors.Add(1)
			return
		}
		m := b[k : k+int(n)]
		b = b[k+int(n):]
		if err := dec.Decode(m, &d); err != nil {
			c.decodeErrors.Add(1)
			continue
		}
		if d.Skipped > 0 {
			c.unknownSections.Add(uint64(d.Skipped))
		}
		// Memberlist may hold its own locks here: merge only; what the core
		// makes ready goes out with the loop's next tick.
		r.mu.Lock()
		st := r.core.MergeState(r.clk.Now(), &d)
		r.mu.Unlock()
		c.rejected.Add(uint64(st.Rejected()))
		c.stateEntries.Add(uint64(len(d.Entries)))
	}
}
