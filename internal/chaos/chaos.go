// Package chaos runs a simulator scenario on a live fleet of edge
// processes under faults, and beside it in the simulator, and measures the
// two the same way.
//
// The live fleet is one edge process per node of the scenario on loopback
// and free ports: an embedded nats-server in each (the servers of a region
// form a NATS cluster, regions are linked by gateways), memberlist inside
// each PoP, and the scenario's rules and replication settings in every
// node's generated config. Every gateway link between two regions runs
// through a TCP proxy of the harness that adds the scenario's inter-region
// latency and jitter, and that the scenario's partitions and cuts close.
// Crashes are SIGKILL, clean stops SIGTERM (the node flushes and says
// goodbye), restarts start the process again (ahead of time by
// restartLead, so that it answers when the scenario says), pauses SIGSTOP
// and SIGCONT.
//
// The load is the simulator's own arrival stream: the simulator runs first
// with its per-request log, and every logged arrival is sent at the same
// time from the run's start, to the same node, over POST /v1/check. The
// run's start is aligned on the rules' windows, as the simulator's epoch
// is. After the live run the simulator runs again with what the live run
// measured of the fleet (see simAgain), and both runs' decisions are
// measured by sim.Replay: the exact trailing-window totals, and one
// central node deciding the same arrivals.
//
// After the run the harness heals every link, waits until the nodes agree,
// and compares what they hold of each key with the admits it recorded
// (lost admits). Every process it started is stopped by its PID on return,
// whatever the outcome.
package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/geolimit/geolimit/sim"
)

// Options configure a run.
type Options struct {
	// Seed, when non-nil, overrides the scenario's seed.
	Seed *uint64
	// KeepLogs, when set, is a directory the nodes' configs and logs are
	// copied to (else they are removed with the run's temporary directory).
	KeepLogs string
	// Logf receives progress lines; nil for none.
	Logf func(format string, args ...any)
	// Bin, when set, is an edge binary to run instead of building one.
	Bin string
	// ConvergeTimeout bounds the wait for the nodes to agree after the run
	// (default 20s).
	ConvergeTimeout time.Duration

	soak *Soak // soak mode: sample RSS, read the logs
}

// maxLiveDuration bounds a live scenario.
const maxLiveDuration = 10 * time.Minute

// Run runs sc live and in the simulator and returns the report.
func Run(ctx context.Context, sc *sim.Scenario, opts Options) (*Report, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if sc.Duration > maxLiveDuration && opts.soak == nil {
		return nil, fmt.Errorf("chaos: duration: a live run lasts at most %s, got %s", maxLiveDuration, sc.Duration)
	}
	plan, err := planOf(sc)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	align, err := alignment(sc)
	if err != nil {
		return nil, err
	}
	seed := sc.Seed
	if opts.Seed != nil {
		seed = *opts.Seed
	}
	// The simulator first: its report, and its arrivals as the live plan.
	var log bytes.Buffer
	simRes, err := sim.RunContext(ctx, sc, sim.Options{Seed: &seed, Log: &log})
	if err != nil {
		return nil, err
	}
	schedule, err := sim.ReadLog(&log)
	if err != nil {
		return nil, err
	}
	log = bytes.Buffer{}
	logf("simulated: %d requests, %d admitted (central %d)", simRes.Report.Requests, simRes.Report.Admitted, simRes.Report.Central.Admitted)

	dir, err := os.MkdirTemp("", "geolimit-chaos-")
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer os.RemoveAll(dir)
	bin := opts.Bin
	if bin == "" {
		logf("building cmd/edge")
		if bin, err = buildEdge(ctx, dir); err != nil {
			return nil, err
		}
	}
	f, err := newFleet(sc, dir, bin, seed, logf)
	if err != nil {
		return nil, err
	}
	defer func() {
		f.stopAll()
		if opts.KeepLogs != "" {
			if err := copyLogs(dir, opts.KeepLogs); err != nil {
				logf("keep logs: %v", err)
			}
		}
	}()
	lr, faults, checks, t0, err := f.runLive(ctx, sc, plan, schedule, align, opts, logf)
	if err != nil {
		return nil, err
	}
	for i := range lr.decisions {
		d := &lr.decisions[i]
		d.T = min(max(d.T, 0), sc.Duration-1)
	}
	if opts.KeepLogs != "" {
		if err := writeDecisions(filepath.Join(dir, "live-requests.csv"), lr.decisions); err != nil {
			return nil, err
		}
	}
	liveMeasured, err := sim.Replay(sc, lr.decisions)
	if err != nil {
		return nil, err
	}
	_ = t0
	var detections []sim.Detection
	var reconnects []sim.Reconnect
	var gwLosses []sim.GatewayLoss
	for _, ft := range faults {
		reconnects = append(reconnects, ft.reconnected...)
		gwLosses = append(gwLosses, ft.gwLosses...)
		for _, n := range ft.nodes {
			if ft.detected > 0 {
				detections = append(detections, sim.Detection{Node: n, At: ft.at, After: ft.detected})
			}
		}
	}
	simMeasured, err := simAgain(ctx, sc, seed, sim.Options{Incarnations: f.incarnations(), Detections: detections, Reconnects: reconnects, GatewayLosses: gwLosses}, schedule)
	if err != nil {
		return nil, err
	}
	logf("simulated with the live incarnations: %d admitted (central %d)", simMeasured.Report.Admitted, simMeasured.Report.Central.Admitted)
	rep := &Report{
		Scenario: sc.Name, Seed: seed, DurationS: sc.Duration.Seconds(),
		Live: side(&liveMeasured.Report), Sim: side(&simMeasured.Report),
		Faults: faults, UnexpectedExits: f.exits(), LostChecks: checks,
		Failed: lr.failed, LateMaxMS: round3(float64(lr.lateMax) / 1e6),
		liveSeries: liveMeasured.Series, simSeries: simMeasured.Series,
	}
	for _, c := range checks {
		rep.LostAdmits += c.Lost
	}
	if rep.UnexpectedExits == nil {
		rep.UnexpectedExits = []Exit{}
	}
	return rep, nil
}

// simAgain runs the simulator again with what the live run measured of
// the fleet (live: the nodes' incarnations, how long each crash or pause
// took to be noticed, how long each heal took to reconnect), and measures
// its decisions as the live ones are. Which member of a PoP publishes a
// key's totals is chosen by hashing the members' names, which hold their
// incarnations; the daemon takes its start time, the simulator counts from
// 1, so without them the two runs give a key to different members, and a
// crash or a restart moves a different share of the keys. Memberlist drops a killed node after 5-13 s, at random;
// while it lists it, the keys the node published for its PoP stand still for
// the other PoPs. After a heal, nats-servers take their gateways back some
// time later (a retry every second or so, through the URLs they know).
// The arrivals depend on none of these; they are checked to be the live
// run's.
func simAgain(ctx context.Context, sc *sim.Scenario, seed uint64, live sim.Options, schedule []sim.Decision) (*sim.Result, error) {
	var log bytes.Buffer
	live.Seed, live.Log = &seed, &log
	if _, err := sim.RunContext(ctx, sc, live); err != nil {
		return nil, err
	}
	ds, err := sim.ReadLog(&log)
	if err != nil {
		return nil, err
	}
	if len(ds) != len(schedule) {
		return nil, fmt.Errorf("chaos: the simulator's run with the live incarnations has %d arrivals, the live run %d", len(ds), len(schedule))
	}
	for i := range ds {
		a, b := ds[i], schedule[i]
		if a.T != b.T || a.Node != b.Node || a.Rule != b.Rule || a.Key != b.Key || a.Cost != b.Cost {
			return nil, fmt.Errorf("chaos: the simulator's run with the live incarnations has other arrivals (at %s: %s %s on %s, live %s %s on %s)", a.T, a.Rule, a.Key, a.Node, b.Rule, b.Key, b.Node)
		}
	}
	return sim.Replay(sc, ds)
}

// alignment is the span the run's start is aligned on: the longest
// window of the rules, which every other window must divide (as the
// simulator's epoch is aligned on every window).
func alignment(sc *sim.Scenario) (time.Duration, error) {
	var a time.Duration
	var ws []time.Duration
	for _, r := range sc.Rules {
		ws = append(ws, time.Duration(r.Window))
		for _, l := range r.Limits {
			ws = append(ws, time.Duration(l.Window))
		}
	}
	for _, w := range ws {
		a = max(a, w)
	}
	for _, w := range ws {
		if w > 0 && a%w != 0 {
			return 0, fmt.Errorf("chaos: rules: window %s does not divide %s; a live run aligns its start on every window", w, a)
		}
	}
	if a > 2*time.Minute {
		return 0, fmt.Errorf("chaos: rules: a live run waits for a window boundary to start; windows up to 2m, got %s", a)
	}
	return a, nil
}

// Fault is one fault the harness injected.
type Fault struct {
	AtS   float64 `json:"at_s"`
	Kind  string  `json:"kind"`
	What  string  `json:"what,omitempty"`
	LateS float64 `json:"late_s,omitempty"`
	// DetectedS, for a crash or a pause, is how long after it every other
	// running member of the node's PoP had dropped it from its members
	// (GET /v1/status); -1 when they had not within 30s. The simulator's
	// second run drops the node that long after (simAgain).
	DetectedS *float64 `json:"detected_s,omitempty"`
	// ReconnectedS, for a heal, is how long after it every running node's
	// nats-server had its gateway to every other region back (through the
	// proxies); -1 when not within 30s. The simulator's links from one
	// region to another carry messages again as long after the heal as
	// that region's gateways to the other took (simAgain).
	ReconnectedS *float64 `json:"reconnected_s,omitempty"`
	// GatewaysLost, for a crash, are the other regions' servers whose
	// gateway to the killed node's region went to its server, and how long
	// after the kill each had one again. The simulator's second run drops
	// those nodes' messages to that region meanwhile (sim.GatewayLoss).
	GatewaysLost []GatewayLost `json:"gateways_lost,omitempty"`

	at    time.Duration
	nodes []string
	// detected is how long after the scenario's time of the crash or
	// pause its PoP's members had dropped it (0: not known); reconnected,
	// for a heal, how long after it the gateways from each region to each
	// other were back.
	detected    time.Duration
	reconnected []sim.Reconnect
	gwLosses    []sim.GatewayLoss
}

// GatewayLost is one node's gateway to a region lost with a killed
// server: Node is the node whose nats-server had it, BackS how long after
// the kill it had one again (-1: not within 30 s).
type GatewayLost struct {
	Node   string  `json:"node"`
	Region string  `json:"region"`
	BackS  float64 `json:"back_s"`
}

func (f *fleet) exits() []Exit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Exit(nil), f.unexpected...)
}

// runLive starts the fleet, runs the schedule and the plan from an
// aligned start, and checks lost admits after the run.
func (f *fleet) runLive(ctx context.Context, sc *sim.Scenario, plan []op, schedule []sim.Decision, align time.Duration, opts Options, logf func(string, ...any)) (*loadResult, []Fault, []LostCheck, time.Time, error) {
	npops := 0
	popSize := map[string]int{}
	for _, rg := range sc.Topology {
		for _, p := range rg.PoPs {
			npops++
			popSize[p.Name] = p.Nodes
		}
	}
	f.start = time.Now()
	logf("starting %d nodes", len(f.nodes))
	for _, n := range f.nodes {
		if err := f.startNode(n); err != nil {
			return nil, nil, nil, time.Time{}, err
		}
	}
	lead := restartLead
	for _, n := range f.nodes {
		if err := waitAnswers(ctx, n, 30*time.Second); err != nil {
			return nil, nil, nil, time.Time{}, err
		}
		// How long a node takes to answer (and to join its PoP and
		// region): the first one waited for is measured, the later ones
		// may have answered before they are asked.
		n.mu.Lock()
		lead = min(lead, time.Since(n.execAt))
		n.mu.Unlock()
		if err := f.noteIncarnation(ctx, n); err != nil {
			return nil, nil, nil, time.Time{}, err
		}
	}
	plan = withLead(plan, lead)
	logf("a node answers %s after it is launched; restarts are launched that much ahead", lead.Round(time.Millisecond))
	f.setLead(lead)
	if err := f.waitReady(ctx, 60*time.Second, npops, popSize); err != nil {
		return nil, nil, nil, time.Time{}, err
	}
	// t0: the next window boundary at least a second away.
	now := time.Now()
	t0 := time.Unix(0, (now.Add(time.Second).UnixNano()/int64(align)+1)*int64(align))
	logf("fleet ready; the run starts at %s (in %s) and lasts %s", t0.UTC().Format("15:04:05"), time.Until(t0).Round(time.Millisecond), sc.Duration)
	f.mu.Lock()
	f.start = t0
	f.unexpected = nil // exits before the run would have failed it
	f.mu.Unlock()

	var faults []Fault
	var fmu sync.Mutex
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		timer := time.NewTimer(0)
		<-timer.C
		for _, o := range plan {
			launch := o.launch
			if o.kind == opRestart {
				// As far ahead as the last restart took to answer (a
				// lone start is quicker than the fleet's at once).
				launch = max(o.at-f.getLead(), o.earliest)
			}
			timer.Reset(time.Until(t0.Add(launch)))
			select {
			case <-runCtx.Done():
				return
			case <-timer.C:
			}
			late := time.Since(t0.Add(o.at))
			var lost []gatewayLink
			if o.kind == opCrash || o.kind == opStop {
				lost = f.gatewaysTo(o.nodes)
			}
			f.apply(runCtx, o, t0, logf)
			done := time.Now()
			fmu.Lock()
			faults = append(faults, Fault{AtS: round3(o.at.Seconds()), Kind: o.kind.String(), What: o.desc, LateS: round3(max(late, 0).Seconds()), at: o.at, nodes: o.nodes})
			i := len(faults) - 1
			fmu.Unlock()
			if o.kind == opHeal {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pairs, d := f.reconnection(runCtx, done)
					fmu.Lock()
					faults[i].ReconnectedS = &d
					off := done.Sub(t0.Add(o.at))
					for ab, s := range pairs {
						faults[i].reconnected = append(faults[i].reconnected, sim.Reconnect{
							At: o.at, From: f.regions[ab[0]], To: f.regions[ab[1]], After: off + time.Duration(s*float64(time.Second))})
					}
					fmu.Unlock()
				}()
			}
			if len(lost) > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					back := f.gatewaysBack(runCtx, lost, o.nodes, done)
					off := done.Sub(t0.Add(o.at))
					fmu.Lock()
					faults[i].GatewaysLost = back
					for _, g := range back {
						if g.Node == "" {
							continue // a server not known by its node
						}
						d := 30 * time.Second
						if g.BackS >= 0 {
							d = time.Duration(g.BackS * float64(time.Second))
						}
						faults[i].gwLosses = append(faults[i].gwLosses, sim.GatewayLoss{At: o.at, Node: g.Node, To: g.Region, After: off + d})
					}
					fmu.Unlock()
				}()
			}
			if o.kind == opCrash || o.kind == opStop || o.kind == opPause {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d := f.detection(runCtx, o.nodes, done)
					fmu.Lock()
					faults[i].DetectedS = &d
					if d >= 0 {
						faults[i].detected = done.Sub(t0.Add(o.at)) + time.Duration(d*float64(time.Second))
					}
					fmu.Unlock()
				}()
			}
		}
	}()
	var rssMu sync.Mutex
	if opts.soak != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.sampleRSS(runCtx, opts.soak, t0, &rssMu)
		}()
	}
	lr := runLoad(runCtx, f, schedule, t0)
	select { // the faults of the run's last moments too
	case <-ctx.Done():
	case <-time.After(time.Until(t0.Add(sc.Duration))):
	}
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, t0, err
	}
	wg.Wait()
	logf("load done: %d decisions, failed %v", len(lr.decisions), lr.failed)
	f.healAll()
	timeout := opts.ConvergeTimeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	checks, err := checkLost(ctx, f, sc, lr.decisions, lr.spans, t0, timeout)
	if err != nil {
		return nil, nil, nil, t0, err
	}
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].AtS < faults[j].AtS })
	if opts.soak != nil {
		opts.soak.summarise(sc.Duration)
		f.scanLogs(opts.soak)
	}
	return lr, faults, checks, t0, nil
}

// apply injects one fault.
func (f *fleet) apply(ctx context.Context, o op, t0 time.Time, logf func(string, ...any)) {
	switch o.kind {
	case opPartition:
		for gi, g := range o.groups {
			for gj, h := range o.groups {
				if gi < gj {
					for _, a := range g {
						for _, b := range h {
							if a != b {
								f.cutRegions(a, b, true)
							}
						}
					}
				}
			}
		}
	case opCut:
		for _, a := range o.groups[0] {
			for _, b := range o.groups[1] {
				if a != b {
					f.cutOneWay(a, b)
				}
			}
		}
	case opHeal:
		f.healAll()
	case opCrash:
		for _, name := range o.nodes {
			f.crash(f.byName[name])
		}
	case opStop:
		for _, name := range o.nodes { // one after the other, as the simulator does
			f.stop(f.byName[name])
		}
	case opRestart:
		for _, name := range o.nodes {
			n := f.byName[name]
			if n.running() {
				f.crash(n)
			}
			if err := f.startNode(n); err != nil {
				logf("restart %s: %v", name, err)
				continue
			}
			go func() {
				if err := waitAnswers(ctx, n, 10*time.Second); err != nil {
					logf("restart %s: %v", name, err)
					return
				}
				n.mu.Lock()
				took := time.Since(n.execAt)
				n.mu.Unlock()
				f.setLead(min(took, restartLead))
				logf("restart %s: answering %+.3fs from its scheduled time", name, time.Since(t0.Add(o.at)).Seconds())
				if err := f.noteIncarnation(ctx, n); err != nil {
					logf("restart %s: %v (the simulator numbers this start itself)", name, err)
				}
			}()
		}
	case opPause, opResume:
		sig := syscall.SIGSTOP
		if o.kind == opResume {
			sig = syscall.SIGCONT
		}
		for _, name := range o.nodes {
			f.byName[name].signal(sig, false)
		}
	}
	logf("t=%s %s %s", time.Since(t0).Round(time.Millisecond), o.kind, o.desc)
}

// writeDecisions writes the live decisions as the simulator's per-request
// log (t_ms,region,pop,node,rule,key,cost,admitted; sim.ReadLog reads it),
// in time order.
func writeDecisions(path string, ds []sim.Decision) error {
	ds = append([]sim.Decision(nil), ds...)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].T < ds[j].T })
	var b bytes.Buffer
	b.WriteString("t_ms,region,pop,node,rule,key,cost,admitted\n")
	for _, d := range ds {
		a := 0
		if d.Admitted {
			a = 1
		}
		fmt.Fprintf(&b, "%d.%06d,%s,%s,%s,%s,%s,%d,%d\n", d.T/time.Millisecond, d.T%time.Millisecond, d.Region, d.PoP, d.Node, d.Rule, d.Key, d.Cost, a)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// copyLogs copies the run's configs and logs from dir to dst.
func copyLogs(dir, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range es {
		if e.IsDir() || e.Name() == "edge" {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err == nil {
			err = os.WriteFile(dst+"/"+e.Name(), b, 0o644)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
