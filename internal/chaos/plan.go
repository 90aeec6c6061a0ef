package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/sim"
)

type opKind uint8

const (
	opPartition opKind = iota // cut every link between the groups' regions
	opCut                     // cut one way: regions a -> regions b
	opHeal
	opCrash
	opRestart // launch: a restarted node is started ahead (see restartLead)
	opPause
	opResume
	opStop // SIGTERM: a clean stop (the node says goodbye)
)

func (k opKind) String() string {
	return [...]string{"partition", "cut", "heal", "crash", "restart", "pause", "resume", "stop"}[k]
}

// op is one fault the harness injects at a time from the run's start.
type op struct {
	at     time.Duration // when the scenario says
	launch time.Duration // when the harness acts (restart: ahead of at)
	// earliest is the earliest a restart may be launched: a little after
	// its node's crash.
	earliest time.Duration
	kind     opKind
	groups   [][]int // regions: partition groups; cut: {from, to}
	nodes    []string
	desc     string
}

// restartLead is how long before its scheduled time a restarted node's
// process is launched at most, so that it answers at that time: the
// simulator starts a node in no time, a process takes a few hundred
// milliseconds. The run measures how long its nodes take to start, and
// launches restarts that much ahead (withLead).
const restartLead = time.Second

// planOf resolves sc's events into the harness's faults, or says why the
// scenario cannot run live.
func planOf(sc *sim.Scenario) ([]op, error) {
	regionIdx := map[string]int{}
	popRegion := map[string]int{}
	nodesOf := map[string][]string{} // region, PoP or node -> nodes
	for ri, rg := range sc.Topology {
		regionIdx[rg.Region] = ri
		for _, p := range rg.PoPs {
			popRegion[p.Name] = ri
			for k := 1; k <= p.Nodes; k++ {
				n := fmt.Sprintf("%s-%d", p.Name, k)
				nodesOf[n] = []string{n}
				nodesOf[p.Name] = append(nodesOf[p.Name], n)
				nodesOf[rg.Region] = append(nodesOf[rg.Region], n)
			}
		}
	}
	regionsOf := func(f string, names []string) ([]int, error) {
		var out []int
		for _, n := range names {
			ri, ok := regionIdx[n]
			if !ok {
				pr, isPoP := popRegion[n]
				if isPoP && len(sc.Topology[pr].PoPs) == 1 {
					ri, ok = pr, true
				}
			}
			if !ok {
				return nil, fmt.Errorf("%s: %q: a live run cuts the gateways between regions only; name regions (or the only PoP of a region)", f, n)
			}
			out = append(out, ri)
		}
		return out, nil
	}
	if len(sc.Topology) > 1 && (sc.Network.InterPoP != sim.Link{}) {
		for _, rg := range sc.Topology {
			if len(rg.PoPs) > 1 {
				return nil, fmt.Errorf("network.inter_pop: region %s has several PoPs; a live run adds no latency between PoPs of a region, so leave inter_pop unset", rg.Region)
			}
		}
	}
	for i := range sc.Network.Links {
		return nil, fmt.Errorf("network.links[%d]: a live run has one link model between regions (inter_region); per-pair overrides are not supported", i)
	}
	if l := sc.Network.InterRegion; l.Loss > 0 || l.Duplicate > 0 || l.Reorder > 0 {
		return nil, fmt.Errorf("network.inter_region: loss, duplicate and reorder are not supported live (gateways run over TCP); latency and jitter are")
	}
	for _, r := range sc.Rules {
		if r.Kind == pop.Concurrency.String() {
			return nil, fmt.Errorf("rules: %q: concurrency rules are not supported live", r.Name)
		}
	}
	var ops []op
	lastCrash := map[string]time.Duration{}
	for i, ev := range sc.Events {
		f := fmt.Sprintf("events[%d]", i)
		switch {
		case ev.Partition != nil:
			var groups [][]int
			seen := map[int]bool{}
			for _, g := range ev.Partition {
				rs, err := regionsOf(f+".partition", g)
				if err != nil {
					return nil, err
				}
				for _, r := range rs {
					seen[r] = true
				}
				groups = append(groups, rs)
			}
			var rest []int
			for ri := range sc.Topology {
				if !seen[ri] {
					rest = append(rest, ri)
				}
			}
			if len(rest) > 0 {
				groups = append(groups, rest)
			}
			ops = append(ops, op{at: ev.At, kind: opPartition, groups: groups, desc: fmt.Sprint(ev.Partition)})
		case ev.Cut != nil:
			from, err := regionsOf(f+".cut.from", ev.Cut.From)
			if err != nil {
				return nil, err
			}
			to, err := regionsOf(f+".cut.to", ev.Cut.To)
			if err != nil {
				return nil, err
			}
			ops = append(ops, op{at: ev.At, kind: opCut, groups: [][]int{from, to}, desc: fmt.Sprintf("%v -> %v", ev.Cut.From, ev.Cut.To)})
		case ev.Heal:
			ops = append(ops, op{at: ev.At, kind: opHeal})
		case ev.Flap != nil:
			var groups [][]int
			for _, g := range ev.Flap.Partition {
				rs, err := regionsOf(f+".flap.partition", g)
				if err != nil {
					return nil, err
				}
				groups = append(groups, rs)
			}
			for t := ev.At; t < ev.Flap.Until; {
				ops = append(ops, op{at: t, kind: opPartition, groups: groups, desc: fmt.Sprint(ev.Flap.Partition)})
				h := min(t+ev.Flap.CutFor, ev.Flap.Until)
				ops = append(ops, op{at: h, kind: opHeal})
				t = h + ev.Flap.HealFor
			}
		case ev.ClockSkew != nil:
			return nil, fmt.Errorf("%s.clock_skew: not supported live (the nodes share the machine's clock)", f)
		case ev.Crash != nil || ev.Stop != nil:
			kind, names := opCrash, ev.Crash
			if ev.Stop != nil {
				kind, names = opStop, ev.Stop
			}
			var ns []string
			for _, n := range names {
				ns = append(ns, nodesOf[n]...)
			}
			for _, n := range ns {
				lastCrash[n] = ev.At
			}
			ops = append(ops, op{at: ev.At, kind: kind, nodes: ns, desc: fmt.Sprint(names)})
		case ev.Pause != nil || ev.Resume != nil:
			kind, names := opPause, ev.Pause
			if ev.Resume != nil {
				kind, names = opResume, ev.Resume
			}
			var ns []string
			for _, n := range names {
				ns = append(ns, nodesOf[n]...)
			}
			ops = append(ops, op{at: ev.At, kind: kind, nodes: ns, desc: fmt.Sprint(names)})
		case ev.Restart != nil:
			var ns []string
			var launch time.Duration
			for _, n := range ev.Restart {
				ns = append(ns, nodesOf[n]...)
			}
			for _, n := range ns {
				c, ok := lastCrash[n]
				if !ok {
					return nil, fmt.Errorf("%s.restart: %s was not crashed before; a live restart starts a crashed node", f, n)
				}
				launch = max(launch, c+200*time.Millisecond)
			}
			earliest := launch
			launch = max(launch, ev.At-restartLead)
			ops = append(ops, op{at: ev.At, kind: opRestart, nodes: ns, desc: fmt.Sprint(ev.Restart), launch: launch, earliest: earliest})
			for _, n := range ns {
				delete(lastCrash, n)
			}
		}
	}
	for i := range ops {
		if ops[i].kind != opRestart {
			ops[i].launch = ops[i].at
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].launch < ops[j].launch })
	return ops, nil
}

// withLead returns plan with every restart launched lead ahead of its time
// (but not before its earliest), in launch order.
func withLead(plan []op, lead time.Duration) []op {
	out := append([]op(nil), plan...)
	for i := range out {
		if out[i].kind == opRestart {
			out[i].launch = max(out[i].at-lead, out[i].earliest)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].launch < out[j].launch })
	return out
}
