package sim

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// Epoch is the Unix time (nanoseconds) at which every run starts:
// 2026-01-01T00:00:00Z, so that windows are aligned as on a real clock.
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
}

// popInfo is one PoP of the topology.
type popInfo struct {
	name, region string
	id           string // region/pop, as pop and the status page name it
	regionIdx    int
	nodes        []int32
	live         []int32 // nodes up, in index order
	acct         sent    // replication sent by the PoP's nodes
	global       sent    // of which to other PoPs
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
	up     bool
	skew   int64
	// nextCore is the time of the core's scheduled tick; an evCore event
	// for another time is stale.
	nextCore int64
}

// linkModel is a resolved Link, in nanoseconds.
type linkModel struct {
	latency, jitter, reorderDelay int64
	loss, dup, reorder            float64
}

type actKind uint8

const (
	actPartition actKind = iota
	actCut
	actHeal
	actSkew
	actCrash
	actRestart
)

// action is a resolved scenario event.
type action struct {
	at     int64
	kind   actKind
	groups [][]int32 // partition groups of PoPs; cut: {from, to}
	nodes  []int32
	offset int64
	hold   bool // a heal inside a flap: the partitioned phase goes on
}

type phaseSpan struct {
	name     string
	from, to int64
}

// engine is one run. It is not safe for concurrent use.
type engine struct {
	partsBuf []*crdt.Delta // encode's results, reused
	sizesBuf []uint32
	ctx      context.Context
	sc       *Scenario
	opts     Options
	policy   string
	rules    []pop.Rule
	now      int64
	end      int64
	q        queue
	trng     *rng // traffic: arrivals, keys, PoPs, nodes
	nrng     *rng // network and timer phases

	regions  []string
	pops     []popInfo
	popIndex map[string]int32 // "region/pop" -> PoP index
	nodes    []*simNode
	links    [][]linkModel
	blocked  [][]bool
	nBlock   int

	flushNow           bool
	intraMax, interMax int
	inbound            received  // delivered from other PoPs, all nodes
	storeSeed          uint64    // seeds every store's hash (see start)
	others             [][]int32 // per PoP, every other PoP (otherPoPs)
	incarnations       uint64    // the last incarnation given to a node
	share              bool      // some rule uses the share policy

	keys     []*keyInfo
	ruleKeys [][]*keyInfo
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
		sc:        sc,
		opts:      opts,
		rules:     rules,
		end:       int64(sc.Duration),
		trng:      newRNG(master.Uint64(), master.Uint64()),
		nrng:      newRNG(master.Uint64(), master.Uint64()),
		storeSeed: master.Uint64() | 1,
		intraMax:  sc.Replication.IntraPoPMaxBytes,
		interMax:  sc.Replication.InterPoPMaxBytes,
	}
	e.flushNow = sc.Replication.FlushInterval == 0
	e.policy = opts.Policy
	if e.policy == "" {
		e.policy = rules[0].OnPartition.String()
		for _, r := range rules {
			if r.OnPartition != rules[0].OnPartition {
				e.policy = "mixed"
			}
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
	e.fleet = newOracle(len(e.keys), len(e.phases))
	if !opts.NoCentral {
		e.central, err = pop.New(pop.Config{
			Self:    crdt.Replica{Region: "central", PoP: "central", Node: "central", Incarnation: 1},
			Rules:   rules,
			MaxKeys: sc.Replication.MaxKeys,
			Seed:    e.storeSeed,
		})
		if err != nil {
			return nil, fmt.Errorf("sim: central node: %w", err)
		}
		e.cOracle = newOracle(len(e.keys), len(e.phases))
	}
	e.schedule()
	return e, nil
}

func (e *engine) buildTopology() error {
	popIndex := map[string]int{}
	for ri, rg := range e.sc.Topology {
		e.regions = append(e.regions, rg.Region)
		for _, p := range rg.PoPs {
			pi := len(e.pops)
			popIndex[p.Name] = pi
			info := popInfo{name: p.Name, region: rg.Region, id: rg.Region + "/" + p.Name, regionIdx: ri}
			for k := 1; k <= p.Nodes; k++ {
				nd := &simNode{idx: int32(len(e.nodes)), name: nodeName(p.Name, k), pop: int32(pi), region: ri}
				info.nodes = append(info.nodes, nd.idx)
				e.nodes = append(e.nodes, nd)
			}
			e.pops = append(e.pops, info)
		}
	}
	e.popIndex = map[string]int32{}
	for i, p := range e.pops {
		e.popIndex[p.id] = int32(i)
	}
	np := len(e.pops)
	e.links = make([][]linkModel, np)
	e.blocked = make([][]bool, np)
	for a := range e.pops {
		e.links[a] = make([]linkModel, np)
		e.blocked[a] = make([]bool, np)
		for b := range e.pops {
			l := e.sc.Network.InterRegion
			switch {
			case a == b:
				l = e.sc.Network.IntraPoP
			case e.pops[a].regionIdx == e.pops[b].regionIdx:
				l = e.sc.Network.InterPoP
			}
			e.links[a][b] = resolveLink(l)
		}
	}
	for _, o := range e.sc.Network.Links {
		from, to := e.popsOf(o.From), e.popsOf(o.To)
		for _, a := range from {
			for _, b := range to {
				e.links[a][b] = resolveLink(o.Link)
				if !o.OneWay {
					e.links[b][a] = resolveLink(o.Link)
				}
			}
		}
	}
	for _, nd := range e.nodes {
		if err := e.start(nd, 0); err != nil {
			return err
		}
	}
	for p := range e.pops {
		e.membersChanged(int32(p), 0)
	}
	return nil
}

func resolveLink(l Link) linkModel {
	return linkModel{
		latency: int64(l.Latency), jitter: int64(l.Jitter), reorderDelay: int64(l.ReorderDelay),
		loss: l.Loss, dup: l.Duplicate, reorder: l.Reorder,
	}
}

// popsOf resolves region and PoP names to PoP indexes, in topology order.
func (e *engine) popsOf(names []string) []int32 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []int32
	for i, p := range e.pops {
		if want[p.name] || want[p.region] {
			out = append(out, int32(i))
		}
	}
	return out
}

// nodesOf resolves node, PoP and region names to node indexes.
func (e *engine) nodesOf(names []string) []int32 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []int32
	for _, nd := range e.nodes {
		p := &e.pops[nd.pop]
		if want[nd.name] || want[p.name] || want[p.region] {
			out = append(out, nd.idx)
		}
	}
	return out
}

func (e *engine) buildTraffic() {
	popIndex := map[string]int{}
	for i, p := range e.pops {
		popIndex[p.name] = i
	}
	ruleIdx := map[string]int{}
	for i, r := range e.rules {
		ruleIdx[r.Name] = i
	}
	e.ruleKeys = make([][]*keyInfo, len(e.rules))
	byName := map[string]*keyInfo{}
	conv := map[*keyInfo]bool{}
	tracked := map[*keyInfo]bool{}
	for i := range e.sc.Traffic {
		t := &e.sc.Traffic[i]
		ri := ruleIdx[t.Rule]
		r := e.rules[ri]
		s := &source{
			idx: i, name: t.Name, cost: t.Cost,
			start: int64(t.Start), end: int64(t.End),
			rate:   float64(t.Rate) * e.opts.RateScale,
			rampTo: float64(t.RampTo) * e.opts.RateScale,
			on:     int64(t.On), off: int64(t.Off),
			anycast: t.Anycast,
			weights: normalise(t.Share, popIndex, len(e.pops)),
			track:   t.Track,
			changes: t.Changes,
		}
		if s.cost == 0 {
			s.cost = r.Cost
		}
		switch t.Pattern {
		case "constant":
			s.pattern = patConstant
		case "onoff":
			s.pattern = patOnOff
		case "ramp":
			s.pattern = patRamp
		default:
			s.pattern = patPoisson
		}
		s.keys = make([]*keyInfo, t.Keys)
		slab := make([]keyInfo, t.Keys) // the stream's new keys, side by side
		for k := range s.keys {
			name := keyName(t.KeyPrefix, t.Anycast, k)
			id := r.Name + "\x00" + name
			ki := byName[id]
			if ki == nil {
				ki = &slab[k]
				*ki = keyInfo{
					idx: len(e.keys), rule: ri, ruleName: r.Name, key: name,
					limit: r.Limit, invLimit: 1 / float64(r.Limit), width: int64(r.Window), scope: uint8(r.Scope),
				}
				for _, l := range r.More {
					ki.more = append(ki.more, winLimit{limit: l.Limit, width: int64(l.Window)})
				}
				byName[id] = ki
				e.keys = append(e.keys, ki)
				e.ruleKeys[ri] = append(e.ruleKeys[ri], ki)
			}
			s.keys[k] = ki
			if k < s.track && !tracked[ki] {
				tracked[ki] = true
				e.tracked = append(e.tracked, ki)
			}
			if k < 16 && r.Scope != pop.ScopeNode && !conv[ki] {
				conv[ki] = true
				e.convKeys = append(e.convKeys, ki)
			}
		}
		if t.Spread == "zipf" && t.Keys > 1 {
			s.alias = newZipfTable(t.Keys, t.ZipfS)
		}
		if s.anycast {
			s.drawHomes(e.trng)
		}
		s.route(e.popUp)
		s.schedule(e.trng, s.start, true)
		e.sources = append(e.sources, s)
	}
}

func (e *engine) popUp(p int) bool { return len(e.pops[p].live) > 0 }

// buildActions resolves the scenario's events into actions sorted by time
// (file order among equal times; a flap expands into partitions and heals)
// and derives the phases from them.
func (e *engine) buildActions() error {
	for _, ev := range e.sc.Events {
		at := int64(ev.At)
		switch {
		case ev.Partition != nil:
			e.actions = append(e.actions, action{at: at, kind: actPartition, groups: e.groups(ev.Partition)})
		case ev.Cut != nil:
			e.actions = append(e.actions, action{at: at, kind: actCut, groups: [][]int32{e.popsOf(ev.Cut.From), e.popsOf(ev.Cut.To)}})
		case ev.Heal:
			e.actions = append(e.actions, action{at: at, kind: actHeal})
		case ev.Flap != nil:
			f := ev.Flap
			g := e.groups(f.Partition)
			for t := at; t < int64(f.Until); {
				e.actions = append(e.actions, action{at: t, kind: actPartition, groups: g})
				h := min(t+int64(f.CutFor), int64(f.Until))
				t = h + int64(f.HealFor)
				e.actions = append(e.actions, action{at: h, kind: actHeal, hold: t < int64(f.Until)})
			}
		case ev.ClockSkew != nil:
			e.actions = append(e.actions, action{at: at, kind: actSkew, nodes: e.nodesOf([]string{ev.ClockSkew.Node}), offset: int64(ev.ClockSkew.Offset)})
		case ev.Crash != nil:
			e.actions = append(e.actions, action{at: at, kind: actCrash, nodes: e.nodesOf(ev.Crash)})
		case ev.Restart != nil:
			e.actions = append(e.actions, action{at: at, kind: actRestart, nodes: e.nodesOf(ev.Restart)})
		}
	}
	sort.SliceStable(e.actions, func(i, j int) bool { return e.actions[i].at < e.actions[j].at })
	// Clocks skewed from the start are skewed before anything happens.
	for _, a := range e.actions {
		if a.at == 0 && a.kind == actSkew {
			for _, n := range a.nodes {
				e.nodes[n].skew = a.offset
			}
		}
	}

	// Replay the actions on a shadow of the fault state to find the phases.
	blocked := 0
	down := make([]bool, len(e.nodes))
	ndown := 0
	faulty := false
	cur := phaseSpan{name: "healthy"}
	for i := 0; i < len(e.actions); {
		at := e.actions[i].at
		hold := false
		for ; i < len(e.actions) && e.actions[i].at == at; i++ {
			a := e.actions[i]
			hold = a.hold
			switch a.kind {
			case actPartition, actCut:
				blocked++
			case actHeal:
				blocked = 0
			case actCrash:
				for _, n := range a.nodes {
					if !down[n] {
						down[n] = true
						ndown++
					}
				}
			case actRestart:
				for _, n := range a.nodes {
					if down[n] {
						down[n] = false
						ndown--
					}
				}
			}
		}
		f := blocked > 0 || ndown > 0 || hold
		if f == faulty {
			continue
		}
		faulty = f
		if at > cur.from {
			cur.to = at
			e.phases = append(e.phases, cur)
		}
		cur = phaseSpan{name: "partitioned", from: at}
		if !f {
			cur.name = "healed"
		}
	}
	cur.to = e.end
	if cur.to > cur.from || len(e.phases) == 0 {
		e.phases = append(e.phases, cur)
	}
	return nil
}

// groups resolves partition groups; the PoPs not named form one more group.
func (e *engine) groups(gs [][]string) [][]int32 {
	var out [][]int32
	named := map[int32]bool{}
	for _, g := range gs {
		ps := e.popsOf(g)
		for _, p := range ps {
			named[p] = true
		}
		out = append(out, ps)
	}
	var rest []int32
	for i := range e.pops {
		if !named[int32(i)] {
			rest = append(rest, int32(i))
		}
	}
	if len(rest) > 0 {
		out = append(out, rest)
	}
	return out
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
	for ri, r := range e.rules {
		step := sampleStep(r.Window)
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
	n, err := pop.New(pop.Config{
		Self:    crdt.Replica{Region: e.pops[nd.pop].region, PoP: e.pops[nd.pop].name, Node: nd.name, Incarnation: nd.inc},
		Rules:   e.rules,
		MaxKeys: e.sc.Replication.MaxKeys,
		Seed:    (e.storeSeed ^ uint64(nd.idx)<<32 ^ nd.inc) | 1,
	})
	if err != nil {
		return fmt.Errorf("sim: node %s: %w", nd.name, err)
	}
	nd.n, nd.up = n, true
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
	return nil
}

func (e *engine) nodeNow(nd *simNode, t int64) int64 { return Epoch + t + nd.skew }

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
	d, err := nd.n.Decide(Epoch+t+nd.skew, k.ruleName, k.key, s.cost)
	if err != nil {
		e.err = fmt.Errorf("sim: decide %s/%s at %s: %w", k.ruleName, k.key, nd.name, err)
		return
	}
	e.fleet.judge(k, t, s.cost, d.Allowed)
	e.fleet.served(nd.region, d.Allowed)
	if e.central != nil {
		cd, err := e.central.Decide(Epoch+t, k.ruleName, k.key, s.cost)
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
	b = append(b, p.region...)
	b = append(b, ',')
	b = append(b, p.name...)
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

func (e *engine) handle(ev event) {
	t := ev.at
	switch ev.kind {
	case evDeliver:
		nd := e.nodes[ev.node]
		if !nd.up || nd.inc != ev.inc {
			return
		}
		e.deliver(nd, &ev, t)
	case evDeliverPoP:
		for _, m := range e.pops[ev.node].live {
			e.deliver(e.nodes[m], &ev, t)
		}
	case evCore:
		nd := e.nodes[ev.node]
		if !nd.up || nd.inc != ev.inc || ev.at != nd.nextCore {
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
		nd.n.Tick(e.nodeNow(nd, t))
		ev.at += int64(time.Second)
		e.q.push(ev)
	case evAction:
		e.act(e.actions[ev.i], t)
	case evChange:
		s := e.sources[ev.i]
		c := s.changes[ev.from]
		if c.Rate != nil {
			s.rate = float64(*c.Rate) * e.opts.RateScale
		}
		if c.Share != nil {
			popIndex := map[string]int{}
			for i, p := range e.pops {
				popIndex[p.name] = i
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
		w := sampleStep(e.rules[ev.i].Window)
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

func (o *oracle) requestsSoFar() uint64 {
	var n uint64
	for i := range o.phases {
		n += o.phases[i].requests
	}
	return n
}

// act applies a scenario action at t.
func (e *engine) act(a action, t int64) {
	switch a.kind {
	case actPartition:
		for gi, g := range a.groups {
			for gj, h := range a.groups {
				if gi == gj {
					continue
				}
				for _, x := range g {
					for _, y := range h {
						e.block(x, y)
					}
				}
			}
		}
	case actCut:
		for _, x := range a.groups[0] {
			for _, y := range a.groups[1] {
				if x != y {
					e.block(x, y)
				}
			}
		}
	case actHeal:
		for x := range e.blocked {
			clear(e.blocked[x])
		}
		e.nBlock = 0
	case actSkew:
		for _, n := range a.nodes {
			e.nodes[n].skew = a.offset
		}
	case actCrash:
		for _, n := range a.nodes {
			e.crash(e.nodes[n])
		}
		e.popsChanged(a.nodes, t)
		e.reroute()
	case actRestart:
		for _, n := range a.nodes {
			nd := e.nodes[n]
			if nd.up {
				e.crash(nd)
			}
			if err := e.start(nd, t); err != nil {
				e.err = err
				return
			}
			e.joinSync(nd, t)
		}
		e.popsChanged(a.nodes, t)
		e.reroute()
	}
}

func (e *engine) block(x, y int32) {
	if !e.blocked[x][y] {
		e.blocked[x][y] = true
		e.nBlock++
	}
}

// popsChanged tells the members of the PoPs of nodes that membership changed.
func (e *engine) popsChanged(nodes []int32, t int64) {
	done := map[int32]bool{}
	for _, n := range nodes {
		if p := e.nodes[n].pop; !done[p] {
			done[p] = true
			e.membersChanged(p, t)
		}
	}
}

func (e *engine) crash(nd *simNode) {
	if !nd.up {
		return
	}
	nd.up, nd.n, nd.core = false, nil, nil
	p := &e.pops[nd.pop]
	for i, x := range p.live {
		if x == nd.idx {
			p.live = append(p.live[:i], p.live[i+1:]...)
			break
		}
	}
}

func (e *engine) reroute() {
	for _, s := range e.sources {
		s.route(e.popUp)
	}
}

// sortEntries puts d's entries in (rule, key, window) order. The store
// yields them in hash order, and its hash is seeded per store, so sorting
// is what makes message sizes and chunking the same run after run.
func sortEntries(d *crdt.Delta) {
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
func (e *engine) encode(d *crdt.Delta, maxBytes int) ([]*crdt.Delta, []uint32, uint64) {
	msgs, err := crdt.Encode(d, maxBytes)
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
		if parts[i], err = crdt.Decode(m); err != nil {
			e.err = fmt.Errorf("sim: decode: %w", err)
			return nil, nil, 0
		}
	}
	return parts, sizes, size
}

// send puts one message from nd to node to on the network: dropped if the
// link is cut or the message lost, else delivered after the link's latency
// and jitter (plus the reorder delay, sometimes), sometimes twice.
func (e *engine) send(nd *simNode, to int32, d *crdt.Delta, size uint32, link uint8, msg repl.Kind, from int32, t int64) {
	dst := e.nodes[to]
	e.transmit(nd.pop, dst.pop, event{kind: evDeliver, node: to, inc: dst.inc, from: from, link: link, msg: msg, size: size, d: d}, t)
}

// sendPoP puts one message from nd on the network to every node of PoP to:
// what a NATS publish does between PoPs. The PoP's nodes sit together, so
// the link's loss, delay and duplication apply to the PoP as a whole, and
// one event delivers to every node live at its arrival.
func (e *engine) sendPoP(nd *simNode, to int32, d *crdt.Delta, size uint32, msg repl.Kind, from int32, t int64) {
	e.transmit(nd.pop, to, event{kind: evDeliverPoP, node: to, from: from, link: uint8(repl.LinkGlobal), msg: msg, size: size, d: d}, t)
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
