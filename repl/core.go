package repl

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/window"
)

// Config configures a Core: the settings an operator tunes and how the
// caller wires the Core in.
type Config struct {
	// Settings are the replication settings (settings.go).
	Settings
	// Node is the node core whose counts are replicated (a *pop.Node).
	// Required.
	Node Node
	// EpochWait is how long the first member by name of a PoP (or a node
	// that knows no membership yet) waits to learn the PoP's epoch from the
	// others before it starts one; the other members wait to learn it (see
	// maybeStartEpoch). 0 means two flush intervals, within 10ms..1s.
	EpochWait time.Duration
	// ColdStart says the PoP's members start together, none with an epoch
	// (the simulator's start): the first member by name starts the PoP's at
	// once, as soon as it knows the membership.
	ColdStart bool
	// PoPLink, GlobalLink say which links exist: a PoP of one node has no
	// PoP link, a deployment of one PoP no global link.
	PoPLink, GlobalLink bool
	// Relay says the global link can address one PoP (KindState).
	Relay bool
	// PhaseSeed is mixed into the hashes that place the timers in their
	// intervals: the node's identity for anti-entropy, its PoP's for the
	// flush slots (the members of a PoP flush together). The simulator sets
	// it from the scenario's seed, the same for the members of a PoP.
	PhaseSeed uint64
	// SpeakDelay is how long the speaker of a flush slot waits for the other
	// members' totals before it publishes the PoP's. 0 means a tenth of the
	// flush interval.
	SpeakDelay time.Duration
}

// syncBurst is how many re-sends asked for from outside the PoP go out at
// once (see Settings.SyncInterval): a heal makes several PoPs ask within one
// moment.
const syncBurst = 4

// normalise validates c and fills its zero fields: the settings' defaults
// (Settings.WithDefaults), EpochWait and SpeakDelay from FlushInterval.
func (c *Config) normalise() error {
	if c.Node == nil {
		return errors.New("repl: config: node is required")
	}
	if err := c.Settings.Validate(); err != nil {
		return fmt.Errorf("repl: config: %w", err)
	}
	c.Settings = c.Settings.WithDefaults()
	if c.EpochWait == 0 {
		c.EpochWait = min(max(2*c.FlushInterval, 10*time.Millisecond), time.Second)
	}
	if c.SpeakDelay == 0 {
		c.SpeakDelay = c.FlushInterval / 10
	}
	switch {
	case c.EpochWait < 0:
		return fmt.Errorf("repl: config: epoch wait %s is negative", c.EpochWait)
	case c.FlushInterval > 0 && (c.SpeakDelay < 0 || c.SpeakDelay >= c.FlushInterval):
		return fmt.Errorf("repl: config: speak delay %s must be below flush interval %s", c.SpeakDelay, c.FlushInterval)
	}
	return nil
}

// Core is one node's replication protocol. It is not safe for concurrent
// use: the runtime serialises every call (the gossip package holds a mutex).
type Core struct {
	cfg     Config
	node    Node
	self    crdt.Replica
	selfPoP PoPID
	name    string // MemberName(self)

	started   bool
	startedAt int64
	epoch     uint64

	members      []string // the PoP's live members, self included, sorted
	memberH      []uint64 // hashes of members
	rank         int      // index of self in members
	membersKnown bool     // SetMembers was called

	nextFlush, nextAE, nextHB int64

	// The periodic anti-entropy round under way: part aePart of aeParts is
	// due at aePartAt(aePart); aePart == aeParts when none is.
	aeParts, aePart int
	aeStart         int64

	// The speaker of a flush slot gathers the PoP's totals for it: its own
	// owned totals and the other members' (forwarded inside the PoP) until
	// speakAt, then publishes them as one message.
	speech    []crdt.Entry
	speechBlk []crdt.Block // penalty blocks gathered with speech
	speakAt   int64        // 0: not gathering
	speakSlot int64
	spoken    int64 // the last slot published

	peers peerTable

	// Work asked for by Step or membership: want is done before the call
	// returns; a sync request and a re-send of the owned totals wait until
	// syncAt and resendAt (0: none), so that what many messages of one
	// moment ask for is done once.
	want             uint8
	syncAt, resendAt int64
	relayTo          map[PoPID]bool
	// resendTAT paces the re-sends other PoPs ask for (a GCRA's theoretical
	// arrival time): one is allowed at t >= resendTAT - (syncBurst-1) x
	// SyncInterval.
	resendTAT   int64
	hasExpected bool

	partitioned []PoPID
	partVersion uint64

	// The near-limit allowance told to the node (allowance.go): the
	// members' latency, whether a sample raised a latency since, and the
	// allowance last told, for pop scope and global rules.
	popLag     lagTracker
	allowDirty bool
	allow      [2]pop.Allowance
	remote     remotePoPs

	// The startup sync (startup.go): syncing until the view is complete or
	// StartupSync passed; popMerged once a member's state was merged;
	// markTo are the PoPs that asked for a marker.
	syncing, syncTimedOut bool
	syncTook              int64
	syncMissing           []PoPID // the PoPs unanswered at a time-out

	driftVersion uint64 // see Drift
	popMerged    bool
	markTo       map[PoPID]bool

	out   []Message
	stats Stats
}

// peer is what a node knows of one remote PoP.
type peer struct {
	id        PoPID
	expected  bool
	lastHeard int64 // receiver's clock; 0 = never
	heardOnce bool
	lastBeat  int64 // the latest heartbeat's SentAt (the sender's clock)
	epoch     uint64
	down      bool
	relayedAt int64
	relayed   bool
	// relayedTo is the epoch the PoP had at the last relay: a PoP that
	// restarted since (a new epoch) gets its former totals at once.
	relayedTo uint64
	// answered holds, per node of the PoP that asked for a sync, when the
	// re-send that answers it is due; at most maxRequesters entries.
	answered map[crdt.Replica]int64
	// lag is the age its messages arrive at (allowance.go).
	lag lagTracker
	// marked is the epoch of this node that the PoP's last marker answered
	// (startup.go).
	marked uint64
	// drift is what its heartbeats say of its rules and clock (drift.go).
	drift peerDrift
	// sender is the node's ID of the replica its deltas came from last.
	sender crdt.InternCache
}

// maxRequesters bounds the nodes of one remote PoP whose sync requests are
// paced one by one; beyond it, a request is paced after the latest answer.
const maxRequesters = 64

// Bits of Core.want.
const (
	wantLocalAE  = 1 << iota // re-send own counts to the PoP
	wantGlobalAE             // re-send owned totals to the other PoPs
	wantAnnounce             // tell the PoP's members the epoch
)

// Stats are a Core's cumulative counters.
type Stats struct {
	Flushes  uint64 `json:"flushes"`
	Forwards uint64 `json:"forwards"`
	// ForwardsDropped: members' totals not taken (another epoch, or a slot
	// far from now); ForwardsRefused: entries of them refused (unknown or
	// non-global rule, dead window, bad key).
	ForwardsDropped uint64 `json:"forwards_dropped"`
	ForwardsRefused uint64 `json:"forward_entries_refused"`
	AntiEntropies   uint64 `json:"anti_entropy_rounds"`
	Heartbeats      uint64 `json:"heartbeats_sent"`
	SyncRequests    uint64 `json:"sync_requests_sent"`
	SyncAnswers     uint64 `json:"sync_answers"`
	// SyncThrottled: sync requests not answered because the same PoP's
	// last one was answered less than SyncInterval before.
	SyncThrottled uint64 `json:"sync_requests_throttled"`
	// ResendsDeferred: re-sends asked for from outside the PoP that had to
	// wait for the SyncInterval pace.
	ResendsDeferred uint64 `json:"resends_deferred"`
	Relays          uint64 `json:"relays"`
	Forged          uint64 `json:"forged_messages"`
	StateDropped    uint64 `json:"state_dropped"`
	EpochChanges    uint64 `json:"epoch_changes"`
	UnknownPoPs     uint64 `json:"unknown_pops_ignored"`
	ForgottenPoPs   uint64 `json:"pops_forgotten"`
	MembersChanges  uint64 `json:"membership_changes"`
	// Markers: markers sent after answering a sync request of a node
	// waiting for its startup sync.
	Markers uint64 `json:"startup_markers_sent"`
}

// New returns a Core for cfg.Node. The first Tick starts it.
func New(cfg Config) (*Core, error) {
	if err := cfg.normalise(); err != nil {
		return nil, err
	}
	self := cfg.Node.Self()
	if self.Incarnation == 0 {
		// The incarnation is the epoch a node starts; 0 means "none".
		return nil, errors.New("repl: config: node incarnation must not be 0")
	}
	c := &Core{
		cfg:     cfg,
		node:    cfg.Node,
		self:    self,
		selfPoP: PoPOf(self),
		name:    MemberName(self),
		peers:   newPeerTable(),
		relayTo: map[PoPID]bool{},
		markTo:  map[PoPID]bool{},
	}
	c.startStartup()
	for _, p := range cfg.expectedPoPs() {
		if p != c.selfPoP && len(c.peers.m) < cfg.MaxPoPs {
			c.peers.add(p, &peer{expected: true})
			c.hasExpected = true
		}
	}
	c.setMembers(nil)
	if !cfg.PoPLink {
		// Alone in its PoP: every start is a new epoch.
		c.setEpoch(0, self.Incarnation)
	}
	return c, nil
}

// Self returns the node's replica identity.
func (c *Core) Self() crdt.Replica { return c.self }

// Epoch returns the PoP epoch this node publishes under (0: not known yet).
func (c *Core) Epoch() uint64 { return c.epoch }

// Stats returns the Core's counters.
func (c *Core) Stats() Stats { return c.stats }

// Ready returns the messages to send and forgets them.
func (c *Core) Ready() []Message {
	out := c.out
	c.out = nil
	return out
}

// Next returns the earliest time at which Tick has timed work (0 before the
// first Tick). A caller may Tick more often; a simulator ticks exactly then.
func (c *Core) Next() int64 {
	if !c.started {
		return 0
	}
	next := min(c.nextAE, c.nextHB)
	if c.aePart < c.aeParts {
		next = min(next, c.aePartAt(c.aePart))
	}
	if c.cfg.FlushInterval > 0 {
		next = min(next, c.nextFlush)
	}
	if c.epoch == 0 && c.rank == 0 {
		next = min(next, c.startedAt+int64(c.cfg.EpochWait))
	}
	for _, at := range [3]int64{c.syncAt, c.resendAt, c.speakAt} {
		if at != 0 {
			next = min(next, at)
		}
	}
	if c.syncing {
		next = min(next, c.startedAt+int64(c.cfg.StartupSync))
	}
	return next
}

// phase spreads a node's timers over an interval, the same way at every run.
func (c *Core) phase(every int64) int64 {
	if every <= 0 {
		return 0
	}
	return int64(mix64(hashString(c.self.String())^c.cfg.PhaseSeed) % uint64(every))
}

// slotPhase is where in the flush interval the PoP's flush slots start: the
// same for every member.
func (c *Core) slotPhase() int64 {
	fl := int64(c.cfg.FlushInterval)
	return int64(mix64(hashString(c.selfPoP.String())^c.cfg.PhaseSeed) % uint64(fl))
}

// slotOf returns the flush slot of time t (the node's clock).
func (c *Core) slotOf(t int64) int64 {
	fl := int64(c.cfg.FlushInterval)
	x := t - c.slotPhase()
	if x < 0 {
		return (x - fl + 1) / fl
	}
	return x / fl
}

// speaker reports whether this member speaks for the PoP in slot: members
// take turns in name order, as for heartbeats.
func (c *Core) speaker(slot int64) bool {
	n := int64(len(c.members))
	if n <= 1 {
		return true
	}
	return ((slot%n)+n)%n == int64(c.rank)
}

// Tick runs the timed work due at now: flush, anti-entropy, heartbeat turns,
// the peer timeout and the unheard set, the epoch wait.
func (c *Core) Tick(now int64) {
	if !c.started {
		c.started, c.startedAt = true, now
		fl, ae, hb := int64(c.cfg.FlushInterval), int64(c.cfg.AntiEntropyInterval), int64(c.cfg.HeartbeatInterval)
		if fl > 0 {
			c.nextFlush = (c.slotOf(now)+1)*fl + c.slotPhase()
		}
		c.nextAE = now + c.phase(ae) + 1
		// Heartbeat slots are aligned to the clock, so members agree on turns;
		// the first check of the peers waits a whole interval so that the
		// others' first heartbeats have had that long to arrive.
		c.nextHB = (now/hb+2)*hb + c.phase(hb/8)
		if c.cfg.GlobalLink {
			c.heartbeat(now) // hello: let the others hear this PoP at once
		}
		c.updateAllowance(now, true)
	}
	c.maybeStartEpoch(now)
	if fl := int64(c.cfg.FlushInterval); fl > 0 && now >= c.nextFlush {
		c.flushSlot(now)
		c.nextFlush = advance(c.nextFlush, now, fl)
	} else if fl > 0 && c.node.Pending() >= c.cfg.MaxBatchEntries {
		c.Flush(now) // a full batch goes out at once
	}
	if c.speakAt != 0 && now >= c.speakAt {
		c.speak(now)
	}
	if now >= c.nextAE {
		c.startAE(now)
		c.nextAE = advance(c.nextAE, now, int64(c.cfg.AntiEntropyInterval))
	}
	c.paceAE(now)
	if now >= c.nextHB {
		hb := int64(c.cfg.HeartbeatInterval)
		if c.cfg.GlobalLink && c.myTurn(now/hb) {
			c.heartbeat(now)
		}
		c.checkPeers(now)
		c.reaskStartup(now)
		c.nextHB = advance(c.nextHB, now, hb)
	}
	c.doWork(now)
}

// startAE starts a periodic anti-entropy round: at once for a small store,
// else in parts over the first half of the interval (paceAE). What is left
// of the round before is sent first.
func (c *Core) startAE(now int64) {
	for c.aePart < c.aeParts {
		c.sendAEPart(now)
	}
	parts := c.node.AntiEntropyParts()
	if parts <= 1 {
		c.aeParts, c.aePart = 0, 0
		c.want |= wantLocalAE | wantGlobalAE
		return
	}
	c.stats.AntiEntropies++
	c.aeParts, c.aePart, c.aeStart = parts, 0, now
}

// aePartAt is when part k of the round under way is due.
func (c *Core) aePartAt(k int) int64 {
	return c.aeStart + int64(k)*(int64(c.cfg.AntiEntropyInterval)/2)/int64(c.aeParts)
}

// paceAE sends the parts of the round under way that are due at now.
func (c *Core) paceAE(now int64) {
	for c.aePart < c.aeParts && now >= c.aePartAt(c.aePart) {
		c.sendAEPart(now)
	}
}

// sendAEPart sends the next part of the round under way.
func (c *Core) sendAEPart(now int64) {
	b := c.node.AntiEntropyPart(now, c.ownsKey, c.aePart, c.aeParts)
	c.aePart++
	c.emitBatch(&b, true, true)
}

// advance returns the first of next, next+every, ... after now.
func advance(next, now, every int64) int64 {
	if next > now {
		return next
	}
	return next + ((now-next)/every+1)*every
}

// Flush sends the counts changed since the last flush: own counts to the
// PoP's members, and the PoP totals of owned keys to the other PoPs.
func (c *Core) Flush(now int64) {
	c.speak(now) // and what this node gathered as a slot's speaker
	c.stats.Flushes++
	b := c.node.FlushTo(now, c.ownsKey, c.hasMembers())
	c.emitBatch(&b, false, true)
}

// flushSlot is the flush of a slot: own counts go to the PoP's members; the
// totals of owned keys go to the slot's speaker (this node, or the others
// over the PoP link), which publishes the PoP's totals as one message, so a
// PoP sends one message per flush interval whatever its size.
func (c *Core) flushSlot(now int64) {
	c.stats.Flushes++
	b := c.node.FlushTo(now, c.ownsKey, c.hasMembers())
	c.emitBatch(&b, false, false)
	if !c.cfg.GlobalLink || c.epoch == 0 {
		return
	}
	slot := c.slotOf(now)
	if !c.cfg.PoPLink || len(c.members) <= 1 {
		c.emitBatch(&pop.Batch{PoP: b.PoP}, false, true)
		return
	}
	if c.speaker(slot) {
		if c.speakAt == 0 || c.speakSlot != slot {
			c.speak(now) // anything left of an earlier slot
			c.speakAt, c.speakSlot = now+int64(c.cfg.SpeakDelay), slot
		}
		c.speech = append(c.speech, b.PoP.Entries...)
		c.speechBlk = append(c.speechBlk, b.PoP.Blocks...)
		return
	}
	if hasContent(&b.PoP) {
		d := b.PoP
		c.stats.Forwards++
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Delta: &d})
	}
}

// speak publishes the totals gathered for the current slot.
func (c *Core) speak(now int64) {
	if c.speakAt != 0 {
		c.spoken = max(c.spoken, c.speakSlot)
	}
	if (len(c.speech) > 0 || len(c.speechBlk) > 0) && c.epoch != 0 {
		d := crdt.Delta{Sender: crdt.PoPReplica(c.self.Region, c.self.PoP, c.epoch), SentAt: now, Epoch: c.epoch, Entries: c.speech, Blocks: c.speechBlk}
		c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindDelta, Delta: &d})
	}
	c.speech, c.speechBlk, c.speakAt = nil, nil, 0
}

// forwarded takes a member's totals for a flush slot: the slot's speaker
// gathers them, or publishes them at once when the slot's message went out
// already; the other members ignore them.
func (c *Core) forwarded(now int64, d *crdt.Delta) bool {
	if !c.cfg.GlobalLink || c.cfg.FlushInterval <= 0 || !hasContent(d) {
		return true
	}
	// The slot is the sender's, so every member judges the same forward the
	// same way whatever its own clock.
	slot, cur := c.slotOf(d.SentAt), c.slotOf(now)
	if span := int64(c.node.MaxSkew()/c.cfg.FlushInterval) + 1; slot < cur-span || slot > cur+span {
		return false // further off than a member's clock may be: dropped
	}
	if !c.speaker(slot) {
		return true
	}
	entries := c.validTotals(now, d.Entries)
	blocks := c.validBlocks(d.Blocks)
	if len(entries) == 0 && len(blocks) == 0 {
		return true
	}
	switch {
	case c.speakAt != 0 && c.speakSlot == slot:
		c.speech = append(c.speech, entries...)
		c.speechBlk = append(c.speechBlk, blocks...)
		return true
	case slot >= cur-1 && slot <= cur+1 && slot > c.spoken && (c.speakAt == 0 || slot > c.speakSlot):
		// Before this node's own flush of the slot: gather from now.
		c.speak(now)
		c.speakAt, c.speakSlot = now+int64(c.cfg.SpeakDelay), slot
		c.speech = append(c.speech, entries...)
		c.speechBlk = append(c.speechBlk, blocks...)
		return true
	}
	// Late, or from a member whose clock is off: on its own.
	late := crdt.Delta{Sender: d.Sender, SentAt: now, Epoch: c.epoch, Entries: entries, Blocks: blocks}
	c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindDelta, Delta: &late})
	return true
}

// validTotals returns a copy of the forwarded entries this node may publish
// for its PoP: global rules it knows, windows live at a time within the
// node's max skew of now (a member's clock may be off by that much), keys of
// legal length.
func (c *Core) validTotals(now int64, es []crdt.Entry) []crdt.Entry {
	out := make([]crdt.Entry, 0, len(es))
	for _, e := range es {
		r, ok := c.node.WireRule(e.Rule)
		if !ok || r.Scope != pop.ScopeGlobal || len(e.Key) == 0 || len(e.Key) > crdt.MaxKeyLen || e.Count == 0 {
			c.stats.ForwardsRefused++
			continue
		}
		skew := int64(c.node.MaxSkew())
		lo, _ := window.Split(now-skew, int64(r.Window))
		hi, _ := window.Split(now+skew, int64(r.Window))
		if e.Window < lo-1 || e.Window > hi {
			c.stats.ForwardsRefused++
			continue
		}
		out = append(out, e)
	}
	return out
}

// validBlocks returns a copy of the forwarded penalty blocks this node may
// publish for its PoP: global rules it knows, keys of legal length. The
// receivers bound how long a block may last.
func (c *Core) validBlocks(bs []crdt.Block) []crdt.Block {
	var out []crdt.Block
	for _, b := range bs {
		r, ok := c.node.Rule(b.Rule)
		if !ok || r.Scope != pop.ScopeGlobal || r.BlockFor == 0 || len(b.Key) == 0 || len(b.Key) > crdt.MaxKeyLen {
			c.stats.ForwardsRefused++
			continue
		}
		out = append(out, b)
	}
	return out
}

// hasContent reports whether d carries counts or penalty blocks.
func hasContent(d *crdt.Delta) bool { return len(d.Entries) > 0 || len(d.Blocks) > 0 }

// hasMembers reports whether the PoP has other members to tell.
func (c *Core) hasMembers() bool { return c.cfg.PoPLink && len(c.members) > 1 }

// emitBatch queues a batch: Local to the PoP (when there are members), PoP
// totals to the other PoPs when global is set.
func (c *Core) emitBatch(b *pop.Batch, reliable, global bool) {
	if c.cfg.PoPLink && len(c.members) > 1 && hasContent(&b.Local) {
		d := b.Local
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Reliable: reliable, Delta: &d})
	}
	if global && c.cfg.GlobalLink && hasContent(&b.PoP) {
		d := b.PoP
		c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindDelta, Reliable: reliable, Delta: &d})
	}
}

func (c *Core) heartbeat(now int64) {
	c.stats.Heartbeats++
	d := c.empty(now)
	d.Entries = c.fingerprints() // drift.go
	c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindHeartbeat, Delta: d})
}

func (c *Core) empty(now int64) *crdt.Delta {
	return &crdt.Delta{Sender: c.self, SentAt: now, Epoch: c.epoch}
}

// myTurn reports whether this member heartbeats in slot: members take turns
// in name order, so a PoP sends one heartbeat per interval.
func (c *Core) myTurn(slot int64) bool {
	n := int64(len(c.members))
	return n <= 1 || slot%n == int64(c.rank)
}

// checkPeers marks PoPs silent for longer than PeerTimeout as partitioned,
// forgets PoPs that are not expected and have been silent for ForgetAfter,
// and tells the node core when the unheard set changed.
func (c *Core) checkPeers(now int64) {
	var part []PoPID
	for id, p := range c.peers.m {
		if !p.expected && now-p.lastHeard > int64(c.cfg.ForgetAfter) {
			c.peers.del(id)
			delete(c.relayTo, id)
			delete(c.markTo, id)
			c.stats.ForgottenPoPs++
			continue
		}
		p.down = c.silent(p, now)
		if p.down && c.counts(p) {
			part = append(part, id)
		}
	}
	sort.Slice(part, func(i, j int) bool { return part[i].Less(part[j]) })
	defer c.updateAllowance(now, true) // latencies decayed, PoPs came or went
	if c.partVersion > 0 && slices.Equal(part, c.partitioned) {
		return
	}
	c.partitioned = part
	c.partVersion++
	names := make([]string, len(part))
	for i, p := range part {
		names[i] = p.String()
	}
	// The share policy limits this side while PoPs are unheard. A PoP leaves
	// the set once something from it has arrived; the node holds its shares
	// a little longer while the rest of its counts come.
	c.node.SetUnheard(now, names)
}

// silent reports whether remote PoP p has been silent for longer than
// PeerTimeout, or never heard.
func (c *Core) silent(p *peer, now int64) bool {
	return !p.heardOnce || now-p.lastHeard > int64(c.cfg.PeerTimeout)
}

// counts reports whether p's silence partitions this PoP: every PoP's does,
// unless ExpectedPoPs names the PoPs that do.
func (c *Core) counts(p *peer) bool { return p.expected || !c.hasExpected }

// Partitioned returns the remote PoPs counted as partitioned at the last
// heartbeat tick (sorted), and a version that changes whenever the set does
// (0 before the first check).
func (c *Core) Partitioned() ([]PoPID, uint64) {
	return slices.Clone(c.partitioned), c.partVersion
}

// SetMembers tells the Core the PoP's live members other than itself (their
// MemberNames), as the membership layer sees them. Key ownership, heartbeat
// turns and who answers for the PoP follow this view; when it changes, the
// totals of keys that moved are published by their new owners, and a new
// member is sent this node's own counts.
func (c *Core) SetMembers(now int64, others []string) {
	oldH, oldRank := c.memberH, c.rank
	old := c.members
	c.membersKnown = true
	if !c.setMembers(others) {
		c.maybeStartEpoch(now)
		c.doWork(now)
		return
	}
	c.updateAllowance(now, true)
	c.maybeStartEpoch(now)
	c.stats.MembersChanges++
	// Tell the members, who then re-send their owned totals too: while views
	// differ a member's forward can reach no speaker (a member that lost
	// another for a moment and got it back), and the members whose own view
	// did not change would not know to repair it.
	c.want |= wantAnnounce
	for _, m := range c.members {
		if _, ok := slices.BinarySearch(old, m); !ok {
			c.want |= wantLocalAE
			break
		}
	}
	if c.cfg.GlobalLink && c.epoch != 0 {
		// Publish at once the totals of the keys this node took over.
		movedIn := func(key string) bool {
			kh := hashString(key)
			return c.owner(c.memberH, kh) == c.rank && (len(oldH) == 0 || c.owner(oldH, kh) != oldRank)
		}
		b := c.node.AntiEntropyPart(now, movedIn, 0, 1)
		b.Local.Entries, b.Local.Blocks = nil, nil
		c.emitBatch(&b, true, true)
		// And all owned totals soon: while views differ, a member may have
		// forwarded totals to a speaker that did not take them, or that died
		// before it spoke.
		c.scheduleResend(now)
	}
	c.doWork(now)
}

// setMembers installs a membership view and reports whether it changed.
func (c *Core) setMembers(others []string) bool {
	ms := make([]string, 0, len(others)+1)
	ms = append(ms, c.name)
	for _, m := range others {
		if m != c.name && m != "" {
			ms = append(ms, m)
		}
	}
	sort.Strings(ms)
	ms = slices.Compact(ms)
	if slices.Equal(ms, c.members) {
		return false
	}
	c.members = ms
	c.memberH = make([]uint64, len(ms))
	for i, m := range ms {
		c.memberH[i] = hashString(m)
		if m == c.name {
			c.rank = i
		}
	}
	return true
}

// SetMemberName sets the name this node goes by in the PoP's membership,
// when the membership layer names it otherwise than MemberName(self). Every
// member must know every other by the same name, or two members may both
// publish a key, or none.
func (c *Core) SetMemberName(name string) {
	if name == "" || name == c.name {
		return
	}
	others := slices.DeleteFunc(slices.Clone(c.members), func(m string) bool { return m == c.name })
	c.name = name
	c.members = nil
	c.setMembers(others)
}

// Members returns the PoP's members as this node sees them (self included).
func (c *Core) Members() []string { return slices.Clone(c.members) }

// ownsKey reports whether this node publishes key's PoP totals: the member
// with the highest rendezvous hash of (member, key) does, so a membership
// change moves only the keys of the members that came or went.
func (c *Core) ownsKey(key string) bool {
	if len(c.members) <= 1 {
		return true
	}
	return c.owner(c.memberH, hashString(key)) == c.rank
}

// ownsTask reports whether this node does a PoP-wide task named task.
func (c *Core) ownsTask(task string) bool {
	return len(c.members) <= 1 || c.owner(c.memberH, hashString("\x00"+task)) == c.rank
}

// owner returns the index of the member (by hashes hs) that owns hash kh.
func (c *Core) owner(hs []uint64, kh uint64) int {
	best, bi := uint64(0), 0
	for i, mh := range hs {
		if s := mix64(kh ^ mh); i == 0 || s > best {
			best, bi = s, i
		}
	}
	return bi
}

// Reconnected tells the Core that the global link came back after an
// outage: the other PoPs are asked for their totals and get this PoP's.
func (c *Core) Reconnected(now int64) {
	c.askSync(now)
	c.doWork(now)
}

// Resync asks for every live count to be re-sent now.
func (c *Core) Resync(now int64) {
	c.want |= wantLocalAE | wantGlobalAE
	c.doWork(now)
}

// setEpoch installs a PoP epoch: totals are published under it from now on,
// re-sent at once, and former epochs' totals are asked back from the others.
func (c *Core) setEpoch(now int64, e uint64) {
	if e == c.epoch {
		return
	}
	if c.epoch != 0 {
		c.stats.EpochChanges++
	}
	c.epoch = e
	c.node.SetEpoch(e)
	c.want |= wantGlobalAE | wantAnnounce
	c.askSync(now)
}

// coalesce is how long a sync request or a re-send of the owned totals
// waits for others asked for meanwhile: one flush interval, at most 50ms.
func (c *Core) coalesce() int64 { return int64(min(c.cfg.FlushInterval, 50*time.Millisecond)) }

// askSync schedules asking the other PoPs for their totals (and re-sending
// this node's owned totals to them).
func (c *Core) askSync(now int64) { c.askSyncFor(now, false) }

// askSyncFor is askSync; remote says a message from another PoP is the
// reason, so the re-send is paced (see remoteResend).
func (c *Core) askSyncFor(now int64, remote bool) {
	if c.syncAt == 0 {
		c.syncAt = max(now+c.coalesce(), 1)
	}
	if remote {
		c.remoteResend(now)
	} else {
		c.scheduleResend(now)
	}
}

// remoteResend schedules a re-send of the owned totals that another PoP's
// message asked for (see remoteResendAt).
func (c *Core) remoteResend(now int64) {
	if c.resendAt == 0 {
		c.remoteResendAt(now + c.coalesce())
	}
}

// remoteResendAt schedules a re-send of the owned totals at at or later,
// paced so that messages from outside the PoP cannot make it re-send its
// totals more than syncBurst times at once and once per SyncInterval
// after that, however many PoPs ask or appear. It
// returns when the re-send is due.
func (c *Core) remoteResendAt(at int64) int64 {
	step := int64(c.cfg.SyncInterval)
	if earliest := c.resendTAT - (syncBurst-1)*step; earliest > at {
		at = earliest
		c.stats.ResendsDeferred++
	}
	at = max(at, 1)
	if c.resendAt == 0 || at < c.resendAt {
		c.resendAt = at
	}
	return c.resendAt
}

// scheduleResend schedules re-sending this node's owned totals to the other
// PoPs, for a reason inside the PoP: within one coalescing interval, even if
// a paced re-send was due later.
func (c *Core) scheduleResend(now int64) {
	if at := max(now+c.coalesce(), 1); c.resendAt == 0 || at < c.resendAt {
		c.resendAt = at
	}
}

// maybeStartEpoch starts an epoch of this node's own when it has none and
// is alone in its PoP, or is the first member by name and has waited
// EpochWait to learn the PoP's (at once when the PoP starts together,
// Config.ColdStart). The other members never start one: they learn it from
// the first member, or from any member that has one (a member announces its
// epoch to a newcomer at once, and a joiner usually learns it from the
// join's push/pull state before its first tick), and take over when the
// membership changes. When two epochs meet anyway, the lowest wins.
func (c *Core) maybeStartEpoch(now int64) {
	if c.epoch != 0 || !c.started {
		return
	}
	alone := c.membersKnown && len(c.members) == 1
	waited := now-c.startedAt >= int64(c.cfg.EpochWait)
	if alone || (c.rank == 0 && (waited || (c.cfg.ColdStart && c.membersKnown))) {
		c.setEpoch(now, c.self.Incarnation)
	}
}

// learnEpoch takes the epoch a member announced: the lowest known epoch
// wins, so a member that started its own epoch before it heard the others
// joins theirs, and the PoP keeps one epoch while any member lives.
func (c *Core) learnEpoch(now int64, e uint64) {
	if e != 0 && (c.epoch == 0 || e < c.epoch) {
		c.setEpoch(now, e)
	}
}

// StepResult says what Step did with a message, for metrics.
type StepResult struct {
	// Forged: the sender does not belong to the PoP the message came from;
	// nothing of it was used.
	Forged bool
	// Dropped: relayed state that arrived before the PoP epoch was known;
	// it is asked for again once it is.
	Dropped bool
	// Applied is what the node core did with the entries.
	Applied pop.ApplyStats
}

// Step handles one received message at now.
func (c *Core) Step(now int64, m Message) StepResult {
	var res StepResult
	d := m.Delta
	if d == nil {
		return res
	}
	if m.Link == LinkPoP && d.Sender.SamePoP(c.self) {
		c.observe(now, d.SentAt, nil)
	}
	switch {
	case m.Link == LinkPoP && d.Sender.IsPoP() && d.Sender.SamePoP(c.self):
		// A member's totals for the slot's speaker.
		if c.epoch == 0 || d.Sender.Incarnation != c.epoch || !c.forwarded(now, d) {
			res.Dropped = true
			c.stats.ForwardsDropped++
		}
	case m.Link == LinkPoP:
		if !d.Sender.SamePoP(c.self) || d.Sender.IsPoP() {
			res.Forged = true
			break
		}
		if d.Epoch == 0 && c.epoch != 0 {
			c.want |= wantAnnounce // a member that does not know it yet
		}
		if !hasContent(d) && d.Epoch != 0 {
			// An announcement: the sender's view of the PoP changed.
			c.scheduleResend(now)
		}
		c.learnEpoch(now, d.Epoch)
		if hasContent(d) {
			res.Applied = c.node.ApplyFrom(now, d, pop.ScopePoP, nil)
			if c.cfg.FlushInterval == 0 {
				c.Flush(now)
			}
		}
	case m.Kind == KindState:
		// Another PoP (From) relays former totals: this PoP's, or, asked
		// for a sync, any PoP's; the transport delivers only state meant
		// for this PoP.
		if m.From == c.selfPoP || !d.Sender.IsPoP() {
			res.Forged = true
			break
		}
		if !hasContent(d) {
			c.marked(m.From, d) // a marker: m.From's answer is complete
			break
		}
		if !d.Sender.SamePoP(c.self) {
			// Another PoP's former epoch: never its current one (its own
			// messages carry those), and only of PoPs this node knows.
			p := c.peers.get(PoPOf(d.Sender))
			switch {
			case (p != nil && p.epoch == d.Sender.Incarnation) || (PoPOf(d.Sender) == m.From && d.Epoch == d.Sender.Incarnation):
				res.Forged = true // no PoP relays a current epoch
			case p == nil || p.epoch == 0:
				res.Dropped = true
				c.stats.StateDropped++
			default:
				res.Applied = c.node.ApplyFrom(now, d, pop.ScopeGlobal, nil)
			}
			break
		}
		if c.epoch == 0 {
			// Which epoch is the current one is not known yet: its totals
			// must not be counted on top of the members' own counts.
			res.Dropped = true
			c.stats.StateDropped++
			break
		}
		res.Applied = c.node.ApplyFrom(now, d, pop.ScopeGlobal, nil)
	default:
		if m.From == c.selfPoP || PoPOf(d.Sender) != m.From {
			res.Forged = true
			break
		}
		if m.Kind == KindDelta {
			c.node.PrefetchDelta(d) // comes in while the sender is looked up
		}
		p := c.heard(m.From, now)
		if p == nil {
			break
		}
		c.observe(now, d.SentAt, p)
		if d.Epoch != 0 && m.Kind != KindDelta {
			p.epoch = d.Epoch // the sender's current epoch
		}
		switch m.Kind {
		case KindHeartbeat:
			c.checkDrift(now, p, d)
			if c.missedBeats(p, d.SentAt) {
				// A short cut (under PeerTimeout) lost messages: repair now
				// rather than at the next anti-entropy round.
				c.askSync(now)
			}
		case KindSync:
			if wantsMarker(d) {
				c.markTo[m.From] = true
			}
			// Every member re-sends the totals it owns, so the PoP answers
			// once. A re-send already due answers every request that came
			// before it; otherwise one is scheduled, no sooner than
			// SyncInterval after the one that answered the same PoP last.
			last := p.lastAnswer(d.Sender, now, int64(c.cfg.SyncInterval))
			if c.resendAt != 0 && c.resendAt >= last {
				c.stats.SyncAnswers++
				p.answered[d.Sender] = c.resendAt
				c.relayTo[m.From] = true
				break
			}
			at := now + c.coalesce()
			if last != 0 && at < last+int64(c.cfg.SyncInterval) {
				at = last + int64(c.cfg.SyncInterval)
				c.stats.SyncThrottled++
			} else {
				c.stats.SyncAnswers++
			}
			p.answered[d.Sender] = c.remoteResendAt(at)
			c.relayTo[m.From] = true // asked: relayed whatever the throttle
		case KindDelta:
			if d.Sender.IsPoP() {
				p.epoch = d.Sender.Incarnation
			}
			if hasContent(d) {
				res.Applied = c.node.ApplyFrom(now, d, pop.ScopeGlobal, &p.sender)
			}
		}
	}
	if res.Forged {
		c.stats.Forged++
	}
	c.updateAllowance(now, false)
	c.doWork(now)
	return res
}

// heard records a message from remote PoP id at now and returns its state,
// or nil when MaxPoPs PoPs are tracked already. A PoP heard for the first
// time or again after a silence is asked for its totals and sent what this
// PoP holds of its former epochs.
func (c *Core) heard(id PoPID, now int64) *peer {
	p := c.peers.get(id)
	if p == nil {
		if len(c.peers.m) >= c.cfg.MaxPoPs {
			c.stats.UnknownPoPs++
			return nil
		}
		p = &peer{}
		c.peers.add(id, p)
	}
	if !p.heardOnce || now-p.lastHeard > int64(c.cfg.PeerTimeout) || p.down {
		// Ask for theirs too: links come back one direction at a time, and
		// what the other side sent when it heard us first may have been lost.
		c.askSyncFor(now, true)
		c.remote.ok = false // it may count from now on
		if _, ok := c.relayTo[id]; !ok {
			c.relayTo[id] = false // heard: relayed at most once per peer timeout
		}
	}
	p.down = false
	if !p.heardOnce || now > p.lastHeard {
		p.lastHeard = now
	}
	p.heardOnce = true
	return p
}

// lastAnswer returns when the last answer to requester's sync requests was
// due (0: none within the last interval), making room for requester in
// p.answered: entries older than interval are dropped, and when the table
// is still full, the latest answer to any node of the PoP counts.
func (p *peer) lastAnswer(requester crdt.Replica, now, interval int64) int64 {
	if p.answered == nil {
		p.answered = map[crdt.Replica]int64{}
	}
	if at, ok := p.answered[requester]; ok {
		return at
	}
	if len(p.answered) < maxRequesters {
		return 0
	}
	var latest int64
	for r, at := range p.answered {
		if now-at >= interval {
			delete(p.answered, r)
		} else {
			latest = max(latest, at)
		}
	}
	if len(p.answered) < maxRequesters {
		return 0
	}
	for r := range p.answered {
		delete(p.answered, r) // make room: the pacing holds through latest
		break
	}
	return latest
}

// missedBeats records a heartbeat sent at sentAt (the sender's clock) and
// reports whether heartbeats in between went missing. Members of a PoP take
// turns, and one may die before the others notice: a gap up to two intervals
// and a half is normal.
func (c *Core) missedBeats(p *peer, sentAt int64) bool {
	prev := p.lastBeat
	if prev != 0 && sentAt <= prev {
		return false // duplicate or reordered
	}
	p.lastBeat = sentAt
	return prev != 0 && sentAt-prev > 5*int64(c.cfg.HeartbeatInterval)/2
}

// doWork does the work asked for that is due at now.
func (c *Core) doWork(now int64) {
	if c.syncAt != 0 && now >= c.syncAt {
		c.syncAt = 0
		// The member that noticed asks (what one member missed, the others
		// may not have); the answers of one moment are shared.
		if c.cfg.GlobalLink {
			c.stats.SyncRequests++
			c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindSync, Delta: c.syncRequest(now)})
		}
	}
	if c.resendAt != 0 && now >= c.resendAt {
		c.resendAt = 0
		c.want |= wantGlobalAE
		c.resendTAT = max(c.resendTAT, now) + int64(c.cfg.SyncInterval)
	}
	if c.want&(wantLocalAE|wantGlobalAE) != 0 {
		c.stats.AntiEntropies++
		b := c.node.AntiEntropyPart(now, c.ownsKey, 0, 1)
		if c.want&wantLocalAE == 0 {
			b.Local.Entries, b.Local.Blocks = nil, nil
		}
		c.emitBatch(&b, true, c.want&wantGlobalAE != 0)
	}
	if c.want&wantAnnounce != 0 && c.epoch != 0 && c.cfg.PoPLink && len(c.members) > 1 {
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Delta: c.empty(now)})
	}
	c.want = 0
	if len(c.relayTo) > 0 {
		c.relay(now)
	}
	if len(c.markTo) > 0 {
		c.sendMarkers(now)
	}
	c.checkStartup(now)
}

// relay sends each PoP in relayTo what this node holds of that PoP's former
// epochs, so that a PoP whose nodes all restarted counts what it admitted
// before, and, to a PoP that asked for a sync, of every PoP's former epochs
// (see former). One member per target PoP relays, at most once per
// PeerTimeout and epoch of the target (each time it asks, at most once per
// coalescing interval).
func (c *Core) relay(now int64) {
	if !c.cfg.Relay || !c.cfg.GlobalLink {
		clear(c.relayTo)
		return
	}
	if c.epoch == 0 {
		return // later: which epoch is whose is not known yet
	}
	targets := c.relayTo
	c.relayTo = map[PoPID]bool{}
	var state []crdt.Delta
	var held *heldAggregates
	for id, asked := range targets {
		p := c.peers.get(id)
		if p == nil || !c.ownsTask("relay/"+id.String()) {
			continue
		}
		if p.relayed && p.relayedTo == p.epoch && now >= p.relayedAt {
			// A PoP heard again: once per peer timeout and epoch. A PoP
			// that asks: each time it is answered (at most once per
			// SyncInterval), but once per coalescing interval.
			if wait := now - p.relayedAt; (!asked && wait < int64(c.cfg.PeerTimeout)) || wait < c.coalesce() {
				continue
			}
		}
		p.relayed, p.relayedAt, p.relayedTo = true, now, p.epoch
		if held == nil {
			h := c.heldAggregates()
			held = &h
		}
		if !held.holdsFormer(c, id, asked) {
			continue // the common case: nothing to relay, no scan of the store
		}
		if state == nil {
			state = c.node.State(now)
		}
		sent := false
		for i := range state {
			d := &state[i]
			if !d.Sender.IsPoP() || len(d.Entries) == 0 || !c.former(d.Sender, id, asked) {
				continue
			}
			dd := *d
			c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindState, To: id, Reliable: true, Delta: &dd})
			sent = true
		}
		if sent {
			c.stats.Relays++
		}
	}
}

// heldAggregates is what relay needs to know of the PoP aggregates this
// node holds counts of, read once per relay rather than once per target:
// with hundreds of PoPs, looking every PoP's epoch up for each target was
// most of a relay's time.
type heldAggregates struct {
	byPoP map[PoPID][]uint64 // the epochs held of each PoP
	// formerKnown: one of them is an epoch other than its PoP's current
	// one, which is known; relayed to any PoP that asks (see former).
	formerKnown bool
}

func (c *Core) heldAggregates() heldAggregates {
	h := heldAggregates{byPoP: map[PoPID][]uint64{}}
	for _, r := range c.node.Replicas() {
		if !r.IsPoP() {
			continue
		}
		of := PoPOf(r)
		h.byPoP[of] = append(h.byPoP[of], r.Incarnation)
		if cur := c.currentEpoch(of); cur != 0 && r.Incarnation != cur {
			h.formerKnown = true
		}
	}
	return h
}

// holdsFormer reports whether the node holds counts of an aggregate it
// would relay to PoP id (see former): when id asked, an earlier epoch of a
// PoP whose current epoch is known; always, an epoch of id other than the
// one it publishes under.
func (h *heldAggregates) holdsFormer(c *Core, id PoPID, asked bool) bool {
	if asked && h.formerKnown {
		return true
	}
	p := c.peers.get(id)
	if p == nil {
		return false
	}
	for _, inc := range h.byPoP[id] {
		if inc != p.epoch {
			return true
		}
	}
	return false
}

// former reports whether aggregate r is relayed to PoP id: an earlier epoch
// of id itself, and, when id asked for a sync, an earlier epoch of any PoP
// (this one included) whose current epoch is known. Nobody else re-sends
// those: live nodes re-send only their current epoch's totals, so a node
// that restarts alone in its PoP would not count them until their windows
// pass.
func (c *Core) former(r crdt.Replica, id PoPID, asked bool) bool {
	of := PoPOf(r)
	if of == id {
		p := c.peers.get(id)
		return p != nil && r.Incarnation != p.epoch
	}
	if !asked {
		return false
	}
	cur := c.currentEpoch(of)
	return cur != 0 && r.Incarnation != cur
}

// currentEpoch returns the epoch PoP id publishes under as this node knows
// it, or 0 when it does not know it (which no aggregate carries).
func (c *Core) currentEpoch(id PoPID) uint64 {
	if id == c.selfPoP {
		return c.epoch
	}
	if p := c.peers.get(id); p != nil && p.epoch != 0 {
		return p.epoch
	}
	return 0
}

// LocalState is the state a joining member learns at once (memberlist
// push/pull): every count this node holds of the live windows, one delta per
// replica, all carrying the PoP epoch; a node holding no count yet still
// sends one empty delta so the joiner learns the epoch.
func (c *Core) LocalState(now int64) []crdt.Delta {
	st := c.node.State(now)
	if len(st) == 0 {
		return []crdt.Delta{*c.empty(now)}
	}
	for i := range st {
		st[i].Epoch = c.epoch
	}
	return st
}

// MergeState merges one delta of a member's LocalState: counts of the own
// PoP's members through the PoP scope, aggregates through the global scope.
func (c *Core) MergeState(now int64, d *crdt.Delta) pop.ApplyStats {
	if d.Sender.SamePoP(c.self) && d.Sender != c.self {
		c.popMerged = true // a member's view of the PoP (startup.go)
	}
	c.learnEpoch(now, d.Epoch)
	var st pop.ApplyStats
	if hasContent(d) {
		via := pop.ScopeGlobal
		if d.Sender.SamePoP(c.self) && !d.Sender.IsPoP() {
			via = pop.ScopePoP
		}
		if via == pop.ScopeGlobal && d.Sender.SamePoP(c.self) && c.epoch == 0 {
			c.stats.StateDropped++
		} else {
			st = c.node.ApplyFrom(now, d, via, nil)
		}
	}
	c.doWork(now)
	return st
}

// RemotePoP is what a node knows of another PoP.
type RemotePoP struct {
	PoPID
	// LastHeard is the receiver's clock at the last message from it (Unix
	// nanoseconds); 0 if never heard.
	LastHeard int64 `json:"last_heard"`
	// Partitioned: silent for longer than PeerTimeout, or never heard.
	Partitioned bool `json:"partitioned"`
	// Epoch is its current epoch, as its latest message said.
	Epoch uint64 `json:"epoch"`
	// Expected: named in Config.ExpectedPoPs. When some PoPs are, only they
	// count as partitioned.
	Expected bool `json:"expected"`
}

// RemotePoPs returns the known remote PoPs, sorted.
func (c *Core) RemotePoPs(now int64) []RemotePoP {
	out := make([]RemotePoP, 0, len(c.peers.m))
	for id, p := range c.peers.m {
		rp := RemotePoP{PoPID: id, Epoch: p.epoch, Expected: p.expected}
		if p.heardOnce {
			rp.LastHeard = p.lastHeard
		}
		rp.Partitioned = c.silent(p, now) && c.counts(p)
		out = append(out, rp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j].PoPID) })
	return out
}

// hashString is FNV-1a: the same on every node and every run, so members
// agree on ownership.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is a bijective finaliser (splitmix64's).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
