package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/internal/statefile"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// Epoch is the Unix time (nanoseconds) at which a run starts unless its
// scenario says otherwise (Scenario.Start): 2026-01-01T00:00:00Z, so that
// windows are aligned as on a real clock.
const Epoch int64 = 1_767_225_600 * int64(time.Second)

// Options tune a run without changing its scenario. The zero value runs the
// scenario as written. Progress and Log are used by the run's goroutine only.
type Options struct {
	// Policy, when set, overrides every rule's on_partition ("keep", "share").
	Policy string
	// Seed, when non-nil, overrides the scenario's seed.
	Seed *uint64
	// RateScale multiplies every traffic rate (0 means 1): tests use it to
	// shorten runs without changing their shape in time.
	RateScale float64
	// Log, when set, receives the per-request CSV log, rows only (the
	// caller writes the header t_ms,region,pop,node,rule,key,cost,admitted).
	Log io.Writer
	// Progress, when set, is called at every percent of simulated time.
	Progress func(done, total time.Duration, requests uint64)
	// WallClock, when set, measures sim_requests_per_s; when nil that figure
	// is 0 and the report depends on the scenario and seed only.
	WallClock func() time.Time
	// NoCentral skips the central reference node (benchmarks).
	NoCentral bool
	// Incarnations, when set, gives the incarnation of each start of a
	// node, in start order (a live run's: the daemon takes its start time,
	// so that both runs name the PoPs' members alike and hash keys to the
	// same owners). A start beyond a node's list, or given 0, takes the
	// next of the simulator's own numbers (one more than the largest so
	// far).
	Incarnations map[string][]uint64
	// Detections, when set, gives how long the members of a node's PoP
	// took to drop it after it crashed or paused at a time (a live run's
	// measure); a crash or pause not listed takes
	// replication.failure_detection.
	Detections []Detection
	// Reconnects, when set, gives how long after a heal at a time the links
	// from one region to another carried messages again (a live run's
	// measure: nats-server's gateways reconnect some time after their
	// links come back); links not listed carry messages at once.
	Reconnects []Reconnect
	// GatewayLosses, when set, gives the nodes whose gateway to another
	// region went to a server that crashed, and how long they were without
	// it (a live run's measure: each node's nats-server keeps one gateway
	// to every other region, to one of its servers, of nats-server's
	// choosing; when that server goes, what the node publishes does not
	// reach the region until the gateway reconnects to another). Messages
	// from such a node to the region are dropped meanwhile.
	GatewayLosses []GatewayLoss
}

// GatewayLoss is how long after a crash at At node Node's messages to
// region To were lost: its gateway to To was to the crashed node's server.
type GatewayLoss struct {
	At    time.Duration
	Node  string
	To    string
	After time.Duration
}

// Reconnect is how long after a heal at At the links from region From to
// region To carried messages again.
type Reconnect struct {
	At       time.Duration
	From, To string
	After    time.Duration
}

// Detection is how long after a node crashed or paused at At its PoP's
// members dropped it.
type Detection struct {
	Node  string
	At    time.Duration
	After time.Duration
}

// popInfo is one PoP of the topology.
type popInfo struct {
	id        identity.PoPID
	regionIdx int
	nodes     []int32
	live      []int32 // nodes up, in index order
	// gone are the members crashed or paused that the others still list
	// until failure detection drops them (replication.failure_detection).
	gone   []goneMember
	acct   sent // replication sent by the PoP's nodes
	global sent // of which to other PoPs
}

// goneMember is a member gone from its PoP (crashed or paused) that the
// others list until until: memberlist names it among the members until it
// has noticed, whatever started meanwhile.
type goneMember struct {
	node  int32
	inc   uint64
	name  string
	until int64
}

// sent counts replication messages and bytes.
type sent struct{ messages, bytes uint64 }

// received counts replication messages, entries and bytes delivered.
type received struct{ messages, entries, bytes uint64 }

// simNode is one node of the fleet: the real pop.Node plus what the
// simulated machine around it knows.
type simNode struct {
	idx    int32
	name   string
	pop    int32
	region int
	n      *pop.Node  // nil while down
	core   *repl.Core // its replication protocol (see wire.go)
	inc    uint64
	starts int // how many times it started
	// stateFile: it keeps a state file (state.nodes), saved is its last
	// write (nil: none yet).
	stateFile bool
	saved     []byte
	up        bool
	// paused: up, but stopped (SIGSTOP): it takes no request, handles no
	// message or timer, and its PoP's members count it gone until resumed.
	paused bool
	skew   int64
	// nextCore is the time of the core's scheduled tick; an evCore event
	// for another time is stale.
	nextCore int64
}

// engine is one run. It is not safe for concurrent use.
type engine struct {
	partsBuf []*wire.Delta // encode's results, reused
	sizesBuf []uint32
	ctx      context.Context
	sc       *Scenario
	opts     Options
	policy   string
	rules    []pop.Rule
	now      int64
	end      int64
	epoch    int64 // the Unix time of the run's time 0: Epoch or Scenario.Start
	q        queue
	trng     *rng // traffic: arrivals, keys, PoPs, nodes
	nrng     *rng // network and timer phases

	regions  []string
	pops     []popInfo
	popIndex map[identity.PoPID]int32 // PoP -> PoP index
	nodes    []*simNode
	links    [][]linkModel
	blocked  [][]bool
	nBlock   int
	// gwLost, by node index, are the spans its messages to a region are
	// lost (Options.GatewayLosses).
	gwLost [][]gwLoss

	flushNow           bool
	intraMax, interMax int
	inbound            received          // delivered from other PoPs, all nodes
	inboundFar         received          // of which from other regions, counts only (KindDelta, KindState)
	inboundBy          [2][4]received    // by link (global, region) and kind
	storeSeed          uint64            // seeds every store's hash (see start)
	others             [][]int32         // per PoP, every other PoP (otherPoPs)
	mates              [][]int32         // per PoP, the other PoPs of its region (regionMates)
	syncTo             []int32           // syncTargets' last answer, reused
	incarnations       uint64            // the last incarnation given to a node
	detectQueued       map[[2]int64]bool // (PoP, time): a members change queued (leave)
	lastBlock          int64             // when the last partition or cut was applied
	share              bool              // some rule uses the share policy

	keys     []*keyInfo
	ruleKeys [][]*keyInfo
	cals     map[int]*calPeriods // by rule index: the calendar rules' (calendar.go)
	sources  []*source
	tracked  []*keyInfo
	convKeys []*keyInfo

	actions []action
	phases  []phaseSpan
	fleet   *oracle
	central *pop.Node
	cOracle *oracle

	probes   []probe
	series   []SeriesRow
	unserved uint64
	disagree uint64 // decisions where the fleet and the central node differ
	log      *bufio.Writer
	logBuf   []byte
	err      error

	// holds are the concurrency rules' holds, by rule index; held the
	// leases of requests in flight (concurrency.go), freeHeld its free
	// slots.
	holds    []time.Duration
	held     []held
	freeHeld []int
}

// Run simulates sc and returns its report, time series and plot data.
func Run(sc *Scenario, opts Options) (*Result, error) {
	return RunContext(context.Background(), sc, opts)
}

// RunContext is Run, stopping with ctx's error when ctx is done (checked at
// every percent of simulated time).
func RunContext(ctx context.Context, sc *Scenario, opts Options) (*Result, error) {
	e, err := newEngine(sc, opts)
	if err != nil {
		return nil, err
	}
	e.ctx = ctx
	var start time.Time
	if opts.WallClock != nil {
		start = opts.WallClock()
	}
	if err := e.run(); err != nil {
		return nil, err
	}
	res := e.result()
	if opts.WallClock != nil {
		if el := opts.WallClock().Sub(start).Seconds(); el > 0 {
			res.Report.SimRequestsPerS = round(float64(res.Report.Requests+res.Report.Central.Requests) / 2 / el)
			if opts.NoCentral {
				res.Report.SimRequestsPerS = round(float64(res.Report.Requests) / el)
			}
		}
	}
	return res, nil
}

func newEngine(sc *Scenario, opts Options) (*engine, error) {
	if opts.RateScale < 0 {
		return nil, errors.New("sim: rate scale must not be negative")
	}
	if opts.RateScale == 0 {
		opts.RateScale = 1
	}
	rules, err := sc.popRules(opts.Policy)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	seed := sc.Seed
	if opts.Seed != nil {
		seed = *opts.Seed
	}
	master := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	e := &engine{
		sc:           sc,
		opts:         opts,
		rules:        rules,
		end:          int64(sc.Duration),
		epoch:        Epoch,
		trng:         newRNG(master.Uint64(), master.Uint64()),
		nrng:         newRNG(master.Uint64(), master.Uint64()),
		storeSeed:    master.Uint64() | 1,
		detectQueued: map[[2]int64]bool{},
		intraMax:     sc.Replication.IntraPoPMaxBytes,
		interMax:     sc.Replication.InterPoPMaxBytes,
	}
	if !sc.Start.IsZero() {
		e.epoch = sc.Start.UnixNano()
	}
	e.flushNow = sc.Replication.FlushInterval == 0
	e.holds = ruleHolds(sc, rules)
	e.policy = opts.Policy
	if e.policy == "" {
		e.policy = ""
		for _, r := range rules {
			switch {
			case r.Kind == pop.Concurrency: // no partition policy
			case e.policy == "":
				e.policy = r.OnPartition.String()
			case e.policy != r.OnPartition.String():
				e.policy = "mixed"
			}
		}
		if e.policy == "" {
			e.policy = pop.Keep.String()
		}
	}
	for _, r := range rules {
		if r.OnPartition == pop.Share {
			e.share = true
		}
	}
	if opts.Log != nil {
		e.log = bufio.NewWriterSize(opts.Log, 1<<16)
		e.logBuf = make([]byte, 0, 256)
	}
	if err := e.buildTopology(); err != nil {
		return nil, err
	}
	e.buildTraffic()
	if err := e.buildActions(); err != nil {
		return nil, err
	}
	e.fleet = newOracle(len(e.keys), len(e.phases), len(rules))
	if !opts.NoCentral {
		e.central, err = pop.New(pop.Config{
			Self:    identity.Replica{PoPID: identity.PoPID{Region: "central", PoP: "central"}, Node: "central", Incarnation: 1},
			Rules:   rules,
			MaxKeys: sc.Replication.MaxKeys,
			Seed:    e.storeSeed,
		})
		if err != nil {
			return nil, fmt.Errorf("sim: central node: %w", err)
		}
		e.cOracle = newOracle(len(e.keys), len(e.phases), len(rules))
	}
	e.schedule()
	return e, nil
}

// schedule queues the run's fixed events: actions, traffic changes, phases,
// samples and progress. Node timers are queued by start.
func (e *engine) schedule() {
	for i, a := range e.actions {
		e.q.push(event{at: a.at, kind: evAction, i: i})
	}
	for si, s := range e.sources {
		for ci, c := range s.changes {
			e.q.push(event{at: int64(c.At), kind: evChange, i: si, from: int32(ci)})
		}
	}
	for i, p := range e.phases {
		if i > 0 {
			e.q.push(event{at: p.from, kind: evPhase, i: i})
		}
		if p.name == "healed" {
			e.q.push(event{at: p.from, kind: evConverge, i: len(e.probes)})
			e.probes = append(e.probes, probe{heal: p.from, result: -1})
		}
	}
	// Admitted/limit samples, samplesPerWindow per window: for the run on
	// the grid k x step from 0, for each phase on the grid phase start +
	// k x step within the phase.
	for ri := range e.rules {
		step := sampleStep(e.width(ri))
		if step <= e.end {
			e.q.push(event{at: step, kind: evRuleSample, i: ri, node: -1})
		}
		for pi, p := range e.phases {
			if p.from+step <= p.to {
				e.q.push(event{at: p.from + step, kind: evRuleSample, i: ri, node: int32(pi)})
			}
		}
	}
	step := int64(e.sc.Output.Step)
	e.q.push(event{at: step, kind: evSeries})
	e.q.push(event{at: max(e.end/100, 1), kind: evProgress})
}

// samplesPerWindow is how many admitted/limit samples a key gives per
// window length, so that a p99 rests on enough samples and a phase shorter
// than a window has some.
const samplesPerWindow = 10

// sampleStep is the time between two samples of a rule of window w.
func sampleStep(w time.Duration) int64 { return max(int64(w)/samplesPerWindow, 1) }

// start (re)starts node nd at t with a new incarnation and queues its timers.
// The caller tells the PoP's members (membersChanged).
func (e *engine) start(nd *simNode, t int64) error {
	// Incarnations grow across the fleet, as start times do in the daemon:
	// an epoch (its starter's incarnation) is never taken twice.
	e.incarnations++
	nd.inc = e.incarnations
	if given := e.opts.Incarnations[nd.name]; nd.starts < len(given) && given[nd.starts] != 0 {
		nd.inc = given[nd.starts]
		e.incarnations = max(e.incarnations-1, nd.inc)
	}
	nd.starts++
	n, err := pop.New(pop.Config{
		Self:    identity.Replica{PoPID: e.pops[nd.pop].id, Node: nd.name, Incarnation: nd.inc},
		Rules:   e.rules,
		MaxKeys: e.sc.Replication.MaxKeys,
		Seed:    (e.storeSeed ^ uint64(nd.idx)<<32 ^ nd.inc) | 1,
	})
	if err != nil {
		return fmt.Errorf("sim: node %s: %w", nd.name, err)
	}
	if nd.stateFile && nd.saved != nil {
		// As the daemon does before it replicates anything.
		st, err := statefile.Decode(nd.saved)
		if err != nil {
			return fmt.Errorf("sim: node %s: state file: %w", nd.name, err)
		}
		now := e.nodeNow(nd, t) // the fleet clock: no correction yet
		restores := e.settingsOf(nd).Restorer(e.pops[nd.pop].id)
		for i := range st.Deltas {
			if restores(st.Deltas[i].Sender) {
				n.RestoreDelta(now, &st.Deltas[i])
			}
		}
	}
	nd.n, nd.up, nd.paused = n, true, false
	if nd.core, err = e.newCore(nd, t); err != nil {
		return err
	}
	p := &e.pops[nd.pop]
	p.live = append(p.live, nd.idx)
	sort.Slice(p.live, func(i, j int) bool { return p.live[i] < p.live[j] })
	nd.nextCore = -1
	nd.core.Tick(e.nodeNow(nd, t))
	e.drain(nd, t)
	e.q.push(event{at: t + e.nrng.Int64N(int64(time.Second)) + 1, kind: evTick, node: nd.idx, inc: nd.inc})
	if nd.stateFile {
		e.q.push(event{at: t + int64(e.sc.State.Interval), kind: evState, node: nd.idx, inc: nd.inc})
	}
	return nil
}

// saveState writes nd's state file (in memory), as the daemon does every
// state.interval; a paused node writes nothing.
func (e *engine) saveState(nd *simNode, t int64) error {
	now := e.fleetNow(nd, t)
	b, err := statefile.EncodeEach(statefile.Header{Self: nd.n.Link().Self(), SavedAt: now}, nd.n.SnapshotEach(now))
	if err != nil {
		return fmt.Errorf("sim: node %s: state file: %w", nd.name, err)
	}
	nd.saved = b
	return nil
}

func (e *engine) nodeNow(nd *simNode, t int64) int64 { return e.epoch + t + nd.skew }

// fleetNow is the time the node hands its node core directly: its clock on
// the fleet clock its replication agreed (repl.Core.ClockCorrection), as the
// daemon's runtime does.
func (e *engine) fleetNow(nd *simNode, t int64) int64 {
	return e.nodeNow(nd, t) + int64(nd.core.ClockCorrection())
}

// run is the main loop: the next event or the next arrival, whichever is
// earlier (events first on a tie, so that zero-latency deliveries land
// before the next request).
func (e *engine) run() error {
	for e.err == nil {
		var src *source
		tr := never
		for _, s := range e.sources {
			if s.next < tr {
				tr, src = s.next, s
			}
		}
		if te := e.q.peek(); te <= tr {
			if te > e.end {
				break
			}
			ev := e.q.pop()
			e.now = ev.at
			e.handle(ev)
			continue
		}
		if tr >= e.end {
			break
		}
		e.now = tr
		e.request(src, tr)
		src.schedule(e.trng, tr, false)
	}
	if e.err != nil {
		return e.err
	}
	if e.log != nil {
		if err := e.log.Flush(); err != nil {
			return fmt.Errorf("sim: log: %w", err)
		}
	}
	return nil
}

func (e *engine) handle(ev event) {
	t := ev.at
	switch ev.kind {
	case evDeliver:
		nd := e.nodes[ev.node]
		if !nd.up || nd.inc != ev.inc || nd.paused {
			return
		}
		e.deliver(nd, &ev, t)
	case evDeliverPoP:
		far := ev.msg == repl.KindSync && ev.link == uint8(repl.LinkGlobal) && e.pops[ev.from].regionIdx != e.pops[ev.node].regionIdx
		for _, m := range e.pops[ev.node].live {
			if far && !e.nodes[m].speaks() {
				continue // not subscribed to other regions' sync requests
			}
			e.deliver(e.nodes[m], &ev, t)
		}
	case evCore:
		nd := e.nodes[ev.node]
		if !nd.up || nd.inc != ev.inc || ev.at != nd.nextCore || nd.paused {
			return
		}
		nd.nextCore = -1
		nd.core.Tick(e.nodeNow(nd, t))
		e.drain(nd, t)
	case evTick:
		nd := e.nodes[ev.node]
		if !nd.up || nd.inc != ev.inc {
			return
		}
		if !nd.paused {
			nd.n.Tick(e.fleetNow(nd, t))
		}
		ev.at += int64(time.Second)
		e.q.push(ev)
	case evAction:
		e.actAt(ev, t)
	case evChange:
		s := e.sources[ev.i]
		c := s.changes[ev.from]
		if c.Rate != nil {
			s.rate = float64(*c.Rate) * e.opts.RateScale
		}
		if c.Share != nil {
			popIndex := map[string]int{}
			for i, p := range e.pops {
				popIndex[p.id.PoP] = i
			}
			s.weights = normalise(c.Share, popIndex, len(e.pops))
			s.route(e.popUp)
		}
		if from := max(t, s.start); c.Rate != nil && from < s.end {
			s.schedule(e.trng, from, true)
		}
	case evPhase:
		e.fleet.cur = &e.fleet.phases[ev.i]
		if e.cOracle != nil {
			e.cOracle.cur = &e.cOracle.phases[ev.i]
		}
	case evRuleSample:
		w := sampleStep(e.width(ev.i))
		e.fleet.sample(e.ruleKeys[ev.i], t, int(ev.node))
		if e.cOracle != nil {
			e.cOracle.sample(e.ruleKeys[ev.i], t, int(ev.node))
		}
		bound := e.end
		if ev.node >= 0 {
			bound = e.phases[ev.node].to
		}
		if t+w <= bound {
			ev.at += w
			e.q.push(ev)
		}
	case evSeries:
		e.sampleSeries(t)
		if step := int64(e.sc.Output.Step); t+step <= e.end {
			ev.at += step
			e.q.push(ev)
		}
	case evConverge:
		if next := e.probe(ev.i, t); next != never {
			ev.at = next
			e.q.push(ev)
		}
	case evRelease:
		e.release(ev)
	case evState:
		nd := e.nodes[ev.node]
		if !nd.up || nd.inc != ev.inc {
			return
		}
		if !nd.paused {
			if err := e.saveState(nd, t); err != nil {
				e.err = err
				return
			}
		}
		ev.at += int64(e.sc.State.Interval)
		e.q.push(ev)
	case evMembers:
		e.membersChanged(ev.node, t)
	case evProgress:
		if e.ctx != nil && e.ctx.Err() != nil {
			e.err = fmt.Errorf("sim: stopped at %s: %w", time.Duration(t), e.ctx.Err())
			return
		}
		if e.opts.Progress != nil {
			e.opts.Progress(time.Duration(t), time.Duration(e.end), e.fleet.requestsSoFar())
		}
		if next := t + max(e.end/100, 1); next <= e.end {
			ev.at = next
			e.q.push(ev)
		}
	}
}
