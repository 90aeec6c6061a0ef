package repl

import (
	"errors"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/blocks"
)

// Core is one node's replication protocol. It is not safe for concurrent
// use: the runtime serialises every call (the gossip package holds a mutex).
type Core struct {
	cfg     Config
	voices  bool // region voices on (Settings.Voices, with a global link)
	node    Node
	self    identity.Replica
	selfPoP identity.PoPID
	name    string // MemberName(self)

	started   bool
	startedAt int64
	// firstCheck ends the span in which a PoP of another region never
	// heard is not taken for silent yet (awaited).
	firstCheck int64
	epoch      uint64

	members      []string // the PoP's live members, self included, sorted
	memberH      []uint64 // hashes of members
	rank         int      // index of self in members
	membersKnown bool     // SetMembers was called

	nextFlush, nextAE, nextHB int64

	// corr is the fleet clock correction (fleetclock.go); corrScratch is
	// its computation's buffer.
	corr        int64
	corrScratch []int64
	corrHeld    bool // unheard expected PoPs held its last computation
	// clocked holds the remote PoPs whose clock was sampled (drift.n >
	// 0), clockedExpected how many of them are expected: the fleet clock
	// reads them without a walk over every PoP.
	clocked         []*peer
	clockedExpected int

	// The periodic anti-entropy round under way: part aePart of aeParts is
	// due at aePartAt(aePart); aePart == aeParts when none is.
	aeParts, aePart int
	aeStart         int64

	// The speaker of a flush slot gathers the PoP's totals for it: its own
	// owned totals and the other members' (forwarded inside the PoP) until
	// speakAt, then publishes them as one message.
	speech    []crdt.Entry
	speechBlk []blocks.Block // penalty blocks gathered with speech
	speakAt   int64          // 0: not gathering
	speakSlot int64
	spoken    int64 // the last slot published

	peers peerTable

	// Work asked for by Step or membership: want is done before the call
	// returns; a sync request and a re-send of the owned totals wait until
	// syncAt and resendAt (0: none), so that what many messages of one
	// moment ask for is done once.
	want             uint8
	syncAt, resendAt int64
	// syncAll: the sync request due at syncAt asks every PoP; else it
	// names those asked in syncScope (sync.go). resendWhat is what the
	// re-send due at resendAt sends (resendPoPTotals, resendRegionTotals).
	syncAll    bool
	syncScope  []string
	resendWhat uint8
	relayTo    map[identity.PoPID]bool
	// resendTAT paces the re-sends other PoPs ask for: one is allowed at
	// t >= resendTAT, which is then SyncInterval later.
	resendTAT int64
	// relayLater are the PoPs that asked for a sync whose relay of the
	// former epochs held waits for relayTAT: one such relay per
	// SyncInterval, whoever asks (relay.go).
	relayLater map[identity.PoPID]bool
	// waitingSince is when each PoP in relayLater first waited: the paced
	// relay serves the longest waiting first, so that one that keeps
	// asking never starves the others.
	waitingSince map[identity.PoPID]int64
	relayTAT     int64
	hasExpected  bool
	expectedPoPs int // how many remote PoPs are expected
	// held caches whether a former epoch is held (relay.go).
	held heldCache

	partitioned []identity.PoPID
	partVersion uint64
	// unheard is the set last told to the node core: partitioned less the
	// PoPs taken for down (crash.go).
	unheard []identity.PoPID
	down    []string // the PoPs taken for down last told (crash.go)

	// The near-limit allowance told to the node (allowance.go): the
	// members' latency, whether a sample raised a latency since, and the
	// allowance last told, for pop scope and global rules.
	popLag     lagTracker
	allowDirty bool
	allow      [2]replicated.Allowance
	remote     remotePoPs

	// The startup sync (startup.go): syncing until the view is complete or
	// StartupSync passed; popMerged once a member's state was merged;
	// markTo are the PoPs that asked for a marker.
	syncing, syncTimedOut bool
	syncTook              int64
	syncMissing           []identity.PoPID // the PoPs unanswered at a time-out

	driftVersion uint64 // see Drift
	popMerged    bool
	markTo       map[identity.PoPID]bool
	// regionTo are the PoPs of other regions whose sync requests this
	// PoP, its region's voice, answers with the region totals sent to
	// them alone (sync.go).
	regionTo map[identity.PoPID]bool

	region regionState // region voices (region.go)

	sparseVoices int           // the voices of sparse updates told to the node (sparse.go)
	sparseLag    time.Duration // and the lag

	out   []Message
	stats Stats
	bye   uint8 // byeQueued, byeSaid: the goodbye is (goodbye.go)
}

// Bits of Core.want.
const (
	wantLocalAE  = 1 << iota // re-send own counts to the PoP
	wantGlobalAE             // re-send owned totals to the other PoPs
	wantAnnounce             // tell the PoP's members the epoch
	wantRegionAE             // re-send the owned region totals (region.go)
	wantNoRegion             // with wantGlobalAE: the PoP totals only
	wantRegionTo             // the owned region totals to the PoPs that asked (sync.go)
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
	// RegionAnswers: region totals sent, as the region's voice, to one
	// PoP of another region that asked for a sync.
	RegionAnswers uint64 `json:"region_answers"`
	// SyncThrottled: sync requests not answered because the same PoP's
	// last one was answered less than SyncInterval before.
	SyncThrottled uint64 `json:"sync_requests_throttled"`
	// RelaysDeferred: relays of former epochs to a PoP that asked for a
	// sync that waited for the SyncInterval pace.
	RelaysDeferred uint64 `json:"relays_deferred"`
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
	// ModesSent and ModesReceived count rule modes (modes.go) per link.
	ModesSent     uint64 `json:"modes_sent"`
	ModesReceived uint64 `json:"modes_received"`
	// Sparse updates (sparse.go): the PoPs the step is computed for (0:
	// every change is published), the totals left out of flushes, and
	// the totals last published that the node remembers.
	SparseVoices  uint64 `json:"sparse_voices"`
	SparseSkipped uint64 `json:"sparse_totals_left_out"`
	SparseHeld    uint64 `json:"sparse_totals_held"`
	// RegionEpochChanges: region epochs started or learned (region.go).
	RegionEpochChanges uint64 `json:"region_epoch_changes"`
	// Goodbyes: goodbyes sent (0 or 1); GoodbyesHeard: goodbyes of other
	// PoPs' nodes taken (goodbye.go).
	Goodbyes      uint64 `json:"goodbyes_sent"`
	GoodbyesHeard uint64 `json:"goodbyes_heard"`
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
		cfg:          cfg,
		voices:       cfg.GlobalLink && cfg.Voices(self.PoPID),
		self:         self,
		selfPoP:      self.PoPID,
		name:         MemberName(self),
		peers:        newPeerTable(),
		relayTo:      map[identity.PoPID]bool{},
		relayLater:   map[identity.PoPID]bool{},
		waitingSince: map[identity.PoPID]int64{},
		markTo:       map[identity.PoPID]bool{},
	}
	c.node = fleetNode{Node: cfg.Node, corr: &c.corr}
	boundPoPSkew(cfg.Node)
	c.startStartup()
	for _, p := range cfg.expectedPoPs() {
		if p != c.selfPoP && len(c.peers.m) < cfg.MaxPoPs {
			c.peers.add(p, &peer{expected: true})
			c.hasExpected = true
		}
	}
	c.expectedPoPs = len(c.peers.m) // every PoP known so far is expected
	c.setMembers(nil)
	if !cfg.PoPLink {
		// Alone in its PoP: every start is a new epoch.
		c.setEpoch(0, self.Incarnation)
	}
	return c, nil
}

// Self returns the node's replica identity.
func (c *Core) Self() identity.Replica { return c.self }

// Epoch returns the PoP epoch this node publishes under (0: not known yet).
func (c *Core) Epoch() uint64 { return c.epoch }

// Stats returns the Core's counters.
func (c *Core) Stats() Stats {
	st := c.stats
	c.sparseStats(&st)
	return st
}

// Ready returns the messages to send and forgets them. Once it returned a
// goodbye (Goodbye) it returns nothing more: what a stopping node would
// send after its goodbye would take it for alive again.
func (c *Core) Ready() []Message {
	out := c.out
	c.out = nil
	if c.bye == byeSaid {
		return nil
	}
	if c.bye == byeQueued {
		c.bye = byeSaid
	}
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
	if len(c.relayLater) > 0 {
		next = min(next, max(c.relayTAT, 1))
	}
	if c.syncing {
		next = min(next, c.startedAt+int64(c.cfg.StartupSync))
	}
	return next
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
		c.firstCheck = c.nextHB + hb // liveness.go: awaited
		c.updateRegion(now)          // region.go
		if c.cfg.GlobalLink {
			c.heartbeat(now) // hello: let the others hear this PoP at once
		}
		c.updateAllowance(now, true)
	}
	c.maybeStartEpoch(now)
	if c.region.epoch == 0 && c.regionVoices() {
		c.updateRegion(now) // region.go: until the region epoch is known
	}
	c.sendTakenModes(now) // modes.go: at once, not with the next flush
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

// advance returns the first of next, next+every, ... after now.
func advance(next, now, every int64) int64 {
	if next > now {
		return next
	}
	return next + ((now-next)/every+1)*every
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
		c.syncAll, c.syncScope = false, c.syncScope[:0]
	}
	if c.resendAt != 0 && now >= c.resendAt {
		c.resendAt = 0
		c.resendWants()
		c.resendTAT = max(c.resendTAT, now) + int64(c.cfg.SyncInterval)
	}
	// Region totals published to every PoP answer the PoPs that asked
	// for them alone too.
	toAll := c.want&wantRegionAE != 0 || c.want&(wantGlobalAE|wantNoRegion) == wantGlobalAE
	if c.want&(wantLocalAE|wantGlobalAE) != 0 {
		c.stats.AntiEntropies++
		b := c.node.AntiEntropyPart(now, c.ownsKey, 0, 1, false)
		if c.want&wantLocalAE == 0 {
			b.Local.Entries = nil
			b.Local.ClearSections()
		}
		c.emitBatch(&b, true, c.want&wantGlobalAE != 0)
		if c.want&wantGlobalAE != 0 && c.want&wantNoRegion == 0 {
			c.regionAE(now, 0, 1, false)
			c.want &^= wantRegionAE
		}
		c.sendModes(now, c.node.Modes(), c.want&wantLocalAE != 0, c.want&wantGlobalAE != 0, true)
	}
	if c.want&wantRegionAE != 0 {
		c.regionAE(now, 0, 1, false)
	}
	switch {
	case toAll:
		c.regionTo = nil
	case c.want&wantRegionTo != 0:
		c.regionTotalsTo(now) // sync.go
	}
	if c.want&wantAnnounce != 0 && c.epoch != 0 && c.cfg.PoPLink && len(c.members) > 1 {
		c.out = append(c.out, Message{Link: LinkPoP, Kind: KindDelta, Delta: c.empty(now)})
		c.announceRegion(now) // region.go
	}
	c.want = 0
	if len(c.relayLater) > 0 && now >= c.relayTAT {
		for id := range c.relayLater {
			c.relayTo[id] = true
		}
		clear(c.relayLater)
	}
	if len(c.relayTo) > 0 {
		c.relay(now)
	}
	if len(c.markTo) > 0 {
		c.sendMarkers(now)
	}
	c.checkStartup(now)
}
