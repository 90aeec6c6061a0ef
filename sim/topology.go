package sim

import (
	"fmt"
	"sort"

	"github.com/geolimit/geolimit/identity"
)

func (e *engine) buildTopology() error {
	popIndex := map[string]int{}
	for ri, rg := range e.sc.Topology {
		e.regions = append(e.regions, rg.Region)
		for _, p := range rg.PoPs {
			pi := len(e.pops)
			popIndex[p.Name] = pi
			info := popInfo{id: identity.PoPID{Region: rg.Region, PoP: p.Name}, regionIdx: ri}
			for k := 1; k <= p.Nodes; k++ {
				nd := &simNode{idx: int32(len(e.nodes)), name: nodeName(p.Name, k), pop: int32(pi), region: ri}
				info.nodes = append(info.nodes, nd.idx)
				e.nodes = append(e.nodes, nd)
			}
			e.pops = append(e.pops, info)
		}
	}
	e.popIndex = map[identity.PoPID]int32{}
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
	// Clocks skewed from the start are skewed before the nodes start, so
	// that nothing, a node's first heartbeat included, is on true time.
	for _, ev := range e.sc.Events {
		if ev.At == 0 && ev.ClockSkew != nil {
			for _, n := range e.nodesOf([]string{ev.ClockSkew.Node}) {
				e.nodes[n].skew = int64(ev.ClockSkew.Offset)
			}
		}
	}
	for _, n := range e.nodesOf(e.sc.State.Nodes) {
		e.nodes[n].stateFile = true
	}
	if err := e.checkLiveInputs(); err != nil {
		return err
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
		if want[p.id.PoP] || want[p.id.Region] {
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
		if want[nd.name] || want[p.id.PoP] || want[p.id.Region] {
			out = append(out, nd.idx)
		}
	}
	return out
}

// checkLiveInputs checks Options.Incarnations (known nodes, no
// incarnation given twice: an epoch is never taken twice) and
// Options.Detections (known nodes, no negative delay) and
// Options.Reconnects (known regions, no negative delay).
func (e *engine) checkLiveInputs() error {
	known := map[string]bool{}
	for _, nd := range e.nodes {
		known[nd.name] = true
	}
	for i, r := range e.opts.Reconnects {
		if len(e.regionPoPs(r.From)) == 0 || len(e.regionPoPs(r.To)) == 0 || r.After < 0 {
			return fmt.Errorf("sim: reconnects[%d]: want two regions of the topology and a delay of at least 0, got %q, %q and %s", i, r.From, r.To, r.After)
		}
	}
	byName := map[string]int32{}
	for _, nd := range e.nodes {
		byName[nd.name] = nd.idx
	}
	for i, g := range e.opts.GatewayLosses {
		n, ok := byName[g.Node]
		if !ok || len(e.regionPoPs(g.To)) == 0 || g.After < 0 || g.At < 0 || e.pops[e.nodes[n].pop].id.Region == g.To {
			return fmt.Errorf("sim: gateway_losses[%d]: want a node of the topology, another region and times of at least 0, got %q, %q, %s and %s", i, g.Node, g.To, g.At, g.After)
		}
		if e.gwLost == nil {
			e.gwLost = make([][]gwLoss, len(e.nodes))
		}
		e.gwLost[n] = append(e.gwLost[n], gwLoss{to: g.To, from: int64(g.At), until: int64(g.At + g.After)})
	}
	for i, d := range e.opts.Detections {
		if !known[d.Node] || d.After < 0 {
			return fmt.Errorf("sim: detections[%d]: want a node of the topology and a delay of at least 0, got %q and %s", i, d.Node, d.After)
		}
	}
	names := make([]string, 0, len(e.opts.Incarnations))
	for name := range e.opts.Incarnations {
		names = append(names, name)
	}
	sort.Strings(names)
	seen := map[uint64]string{}
	for _, name := range names {
		if !known[name] {
			return fmt.Errorf("sim: incarnations: no node %q in the topology", name)
		}
		for i, inc := range e.opts.Incarnations[name] {
			if inc == 0 {
				continue
			}
			if other, ok := seen[inc]; ok {
				return fmt.Errorf("sim: incarnations: %d given to %s and %s (start %d)", inc, other, name, i+1)
			}
			seen[inc] = name
		}
	}
	return nil
}
