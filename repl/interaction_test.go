package repl

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// Interaction tests: testdata/*.txt scripts replayed against several Cores
// wired by a simulated network (see datadriven_test.go for the format).
//
// Commands (times are offsets from t0, 2026-01-01T00:00:00Z; nodes are
// named by their node name, e.g. a1 for eu/ams/a1):
//
//	config flush=50ms ae=5s timeout=2s hb=500ms epochwait=2s maxbatch=N maxpops=N expected=eu/ams,us/iad
//	    defaults for the nodes created later
//	node name=eu/ams/a1 inc=1 [pop] [global] [norelay] [skew=10ms] [config keys]
//	    a pop.Node (rules: global "api" 1000/10s, pop-scope "ip" 100/10s) and its Core
//	members a1 a2 a3          SetMembers on each with the MemberNames of the others
//	tick [t=1s|by=100ms] [nodes=a1,a2]
//	                          move the clock, Tick the (live) nodes; prints what became ready
//	decide a1 api k1,k2 5     Decide cost 5 for each key (and Flush when flush=0)
//	flush a1                  Core.Flush
//	deliver [rounds=N|all]    deliver the queued messages: LinkPoP to the other live
//	                          members of the sender's PoP, LinkGlobal to every live node of
//	                          every other PoP (KindState to the nodes of To), skipping cut
//	                          links; prints the deliveries, what receivers did beyond
//	                          merging, and what they made ready
//	drop                      lose every queued message
//	run for=3s|until=5s [show=heartbeat,sync,state,delta,pop|none]
//	                          event loop: tick each node at its Next, deliver at once
//	cut eu/ams us/iad [oneway]   heal [eu/ams us/iad]
//	                          endpoints are PoPs or nodes (cut a1 us/iad: a1's global link)
//	reconnected a1            Core.Reconnected (the node's global link came back)
//	crash a1                  restart a1 inc=2
//	join a4 from=a1           LocalState of a1 merged into a4 (memberlist push/pull)
//	forge b1 global delta sender=eu/ams/*#1 epoch=1 [to=eu/ams] api/k=5
//	                          queue a message as b1's transport would carry it
//	view a1,b1|all api k1,k2  the node's windows of the key, per replica
//	owners a1,a2,a3 k1,task:sync
//	                          which node publishes each key's PoP total (task:name: does
//	                          the PoP-wide task), in each node's own view
//	status a1                 epoch, members, partitioned PoPs, remote PoPs, stats

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// ruleWindow is the window of both test rules.
const ruleWindow = 10 * time.Second

func testRules() []pop.Rule {
	return []pop.Rule{
		{Name: "api", Limit: 1000, Window: ruleWindow, Cost: 1, Scope: pop.ScopeGlobal},
		{Name: "ip", Limit: 100, Window: ruleWindow, Cost: 1, Scope: pop.ScopePoP},
	}
}

func TestInteraction(t *testing.T) {
	for _, path := range scripts(t) {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			h := newHarness(t)
			runScript(t, path, h.run)
		})
	}
}

type hnode struct {
	name  string
	rep   identity.Replica
	pop   identity.PoPID
	skew  int64
	opts  *ddCmd // the node command, for restarts
	n     *pop.Node
	c     *Core
	alive bool

	// What was last printed of the core, to print changes only.
	epoch   uint64
	partVer uint64
}

type queued struct {
	src *hnode
	m   Message
}

type harness struct {
	t      *testing.T
	now    int64
	defs   map[string]string // config defaults
	nodes  map[string]*hnode
	queue  []queued
	cut    map[[2]string]bool // endpoint pairs: PoPs (region/pop) or nodes
	events []string
}

func newHarness(t *testing.T) *harness {
	return &harness{
		t:   t,
		now: t0,
		defs: map[string]string{
			"flush": "50ms", "ae": "5s", "timeout": "2s",
		},
		nodes: map[string]*hnode{},
		cut:   map[[2]string]bool{},
	}
}

type cmdError string

func (h *harness) fail(format string, args ...any) {
	panic(cmdError(fmt.Sprintf(format, args...)))
}

func (h *harness) run(c *ddCmd) (out string) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(cmdError)
			if !ok {
				panic(r)
			}
			out = "error: " + string(e)
		}
	}()
	var b strings.Builder
	switch c.Name {
	case "config":
		for k, v := range c.KV {
			h.defs[k] = v
		}
	case "node":
		h.cmdNode(c)
	case "members":
		h.cmdMembers(&b, c)
	case "tick":
		h.cmdTick(&b, c)
	case "decide":
		h.cmdDecide(&b, c)
	case "flush":
		mark := len(h.queue)
		for _, n := range h.nodeList(c.Args) {
			n.c.Flush(h.nodeNow(n))
			h.collect(n)
		}
		h.printQueueFrom(&b, mark)
	case "deliver":
		h.cmdDeliver(&b, c)
	case "drop":
		for _, q := range h.queue {
			fmt.Fprintf(&b, "dropped %s\n", h.fmtMsg(q.src, &q.m))
		}
		h.queue = nil
	case "run":
		h.cmdRun(&b, c)
	case "cut", "heal":
		h.cmdCut(c)
	case "crash":
		for _, n := range h.nodeList(c.Args) {
			n.alive = false
		}
	case "restart":
		h.cmdRestart(c)
	case "join":
		h.cmdJoin(&b, c)
	case "forge":
		h.cmdForge(&b, c)
	case "view":
		h.cmdView(&b, c)
	case "reconnected":
		mark := len(h.queue)
		for _, n := range h.nodeList(c.Args) {
			n.c.Reconnected(h.nodeNow(n))
			h.collect(n)
		}
		h.printQueueFrom(&b, mark)
	case "owners":
		h.cmdOwners(&b, c)
	case "status":
		for _, n := range h.nodeList(c.Args) {
			h.status(&b, n)
		}
	case "share":
		// What the node core takes for unheard (the share policy's cut).
		for _, n := range h.nodeList(c.Args) {
			st := n.n.Partition(h.nodeNow(n))
			fmt.Fprintf(&b, "%s share unheard=[%s]\n", n.name, strings.Join(st.Unheard, " "))
		}
	default:
		h.fail("unknown command %q", c.Name)
	}
	return b.String()
}

// --- parsing helpers

func (h *harness) dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		h.fail("bad duration %q", s)
	}
	return d
}

func (h *harness) uint(s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		h.fail("bad number %q", s)
	}
	return v
}

func (h *harness) popID(s string) identity.PoPID {
	r, p, ok := strings.Cut(s, "/")
	if !ok || r == "" || p == "" {
		h.fail("bad PoP %q (want region/pop)", s)
	}
	return identity.PoPID{Region: r, PoP: p}
}

// replica parses region/pop/node#inc.
func (h *harness) replica(s string) identity.Replica {
	rest, inc, ok := strings.Cut(s, "#")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		h.fail("bad replica %q (want region/pop/node#inc)", s)
	}
	return identity.Replica{PoPID: identity.PoPID{Region: parts[0], PoP: parts[1]}, Node: parts[2], Incarnation: h.uint(inc)}
}

func (h *harness) node(name string) *hnode {
	n := h.nodes[name]
	if n == nil {
		h.fail("unknown node %q", name)
	}
	return n
}

// nodeList resolves node names (comma lists allowed; "all": every node),
// sorted by name.
func (h *harness) nodeList(args []string) []*hnode {
	var out []*hnode
	for _, a := range args {
		for _, name := range strings.Split(a, ",") {
			if name == "all" {
				out = append(out, h.sorted()...)
				continue
			}
			out = append(out, h.node(name))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return slices.Compact(out)
}

func (h *harness) sorted() []*hnode {
	out := make([]*hnode, 0, len(h.nodes))
	for _, n := range h.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (h *harness) live() []*hnode {
	return slices.DeleteFunc(h.sorted(), func(n *hnode) bool { return !n.alive })
}

func (h *harness) nodeNow(n *hnode) int64 { return h.now + n.skew }

func (h *harness) opt(c *ddCmd, key string) (string, bool) {
	if v, ok := c.KV[key]; ok {
		return v, true
	}
	v, ok := h.defs[key]
	return v, ok
}

// --- nodes

func (h *harness) cmdNode(c *ddCmd) {
	rep := h.replica(c.KV["name"] + "#" + c.KV["inc"])
	if h.nodes[rep.Node] != nil {
		h.fail("node %s exists", rep.Node)
	}
	n := &hnode{name: rep.Node, rep: rep, pop: rep.PoPID, opts: c}
	h.start(n)
	h.nodes[n.name] = n
}

func (h *harness) cmdRestart(c *ddCmd) {
	for _, n := range h.nodeList(c.Args) {
		n.rep.Incarnation = h.uint(c.KV["inc"])
		h.start(n)
	}
}

// start gives n a fresh node core and Core (nothing of a former
// incarnation survives).
func (h *harness) start(n *hnode) {
	o := n.opts
	if v, ok := h.opt(o, "skew"); ok {
		n.skew = int64(h.dur(v))
	}
	pn, err := pop.New(pop.Config{Self: n.rep, Rules: testRules(), Seed: 1})
	if err != nil {
		h.fail("%v", err)
	}
	cfg := Config{
		Node:       pn.Link(),
		PoPLink:    o.has("pop"),
		GlobalLink: o.has("global"),
		Relay:      o.has("global") && !o.has("norelay"),
	}
	if !o.has("sparse") {
		// Scripts show every change published unless they ask for sparse
		// updates (sparse_test.go tests them).
		off := false
		cfg.SparseUpdates = &off
	}
	durs := map[string]*time.Duration{
		"flush": &cfg.FlushInterval, "ae": &cfg.AntiEntropyInterval, "timeout": &cfg.PeerTimeout,
		"hb": &cfg.HeartbeatInterval, "epochwait": &cfg.EpochWait,
	}
	for k, p := range durs {
		if v, ok := h.opt(o, k); ok {
			*p = h.dur(v)
		}
	}
	if v, ok := h.opt(o, "maxbatch"); ok {
		cfg.MaxBatchEntries = int(h.uint(v))
	}
	if v, ok := h.opt(o, "maxpops"); ok {
		cfg.MaxPoPs = int(h.uint(v))
	}
	if v, ok := h.opt(o, "expected"); ok {
		for _, p := range strings.Split(v, ",") {
			cfg.ExpectedPoPs = append(cfg.ExpectedPoPs, h.popID(p).String())
		}
	}
	core, err := New(cfg)
	if err != nil {
		h.fail("%v", err)
	}
	n.n, n.c, n.alive = pn, core, true
	n.epoch, n.partVer = core.Epoch(), 0
}

func (h *harness) cmdMembers(b *strings.Builder, c *ddCmd) {
	ns := h.nodeList(c.Args)
	mark := len(h.queue)
	for _, n := range ns {
		var others []string
		for _, o := range ns {
			if o != n {
				others = append(others, MemberName(o.rep))
			}
		}
		n.c.SetMembers(h.nodeNow(n), others)
		h.collect(n)
	}
	h.printQueueFrom(b, mark)
}

func (h *harness) setTime(c *ddCmd) {
	at := h.now
	if v, ok := c.KV["t"]; ok {
		at = t0 + int64(h.dur(v))
	}
	if v, ok := c.KV["by"]; ok {
		at = h.now + int64(h.dur(v))
	}
	if at < h.now {
		h.fail("time goes back: %s < %s", fmtTime(at), fmtTime(h.now))
	}
	h.now = at
}

func (h *harness) cmdTick(b *strings.Builder, c *ddCmd) {
	h.setTime(c)
	ns := h.live()
	if v, ok := c.KV["nodes"]; ok {
		ns = slices.DeleteFunc(h.nodeList([]string{v}), func(n *hnode) bool { return !n.alive })
	}
	mark := len(h.queue)
	for _, n := range ns {
		n.c.Tick(h.nodeNow(n))
		h.collect(n)
	}
	h.printQueueFrom(b, mark)
}

func (h *harness) cmdDecide(b *strings.Builder, c *ddCmd) {
	if len(c.Args) != 4 {
		h.fail("usage: decide node rule key[,key...] cost")
	}
	n := h.node(c.Args[0])
	cost := h.uint(c.Args[3])
	for _, key := range strings.Split(c.Args[2], ",") {
		d, err := n.n.Decide(h.nodeNow(n), c.Args[1], key, cost)
		if err != nil {
			fmt.Fprintf(b, "%s %s/%s: %v\n", n.name, c.Args[1], key, err)
			continue
		}
		verdict := "allowed"
		if !d.Allowed {
			verdict = "denied"
		}
		fmt.Fprintf(b, "%s %s/%s cost=%d %s remaining=%d\n", n.name, c.Args[1], key, cost, verdict, d.Remaining)
	}
	if n.c.cfg.FlushInterval == 0 {
		mark := len(h.queue)
		n.c.Flush(h.nodeNow(n))
		h.collect(n)
		h.printQueueFrom(b, mark)
	}
}

func (h *harness) cmdRun(b *strings.Builder, c *ddCmd) {
	end := h.now
	if v, ok := c.KV["for"]; ok {
		end = h.now + int64(h.dur(v))
	}
	if v, ok := c.KV["until"]; ok {
		end = t0 + int64(h.dur(v))
	}
	var show map[string]bool
	if v, ok := c.KV["show"]; ok {
		show = map[string]bool{}
		for _, k := range strings.Split(v, ",") {
			show[k] = true
		}
	}
	same := 0
	for {
		h.deliverAll(b, show, true)
		next := int64(1<<63 - 1)
		for _, n := range h.live() {
			nx := n.c.Next()
			if nx == 0 {
				nx = h.now
			} else {
				nx -= n.skew
			}
			next = min(next, nx)
		}
		if next > end {
			break
		}
		if next <= h.now {
			if same++; same > 1000 {
				h.fail("Next does not advance at %s", fmtTime(h.now))
			}
			next = h.now
		} else {
			same = 0
		}
		h.now = next
		for _, n := range h.live() {
			if nx := n.c.Next(); nx == 0 || nx <= h.nodeNow(n) {
				n.c.Tick(h.nodeNow(n))
				h.collect(n)
			}
		}
	}
	h.now = end
	h.flushEvents(b, true)
}

// --- the network

// collect moves what n's core made ready to the network and records n's
// epoch and partition changes.
func (h *harness) collect(n *hnode) {
	for _, m := range n.c.Ready() {
		h.queue = append(h.queue, queued{src: n, m: m})
	}
	if e := n.c.Epoch(); e != n.epoch {
		h.events = append(h.events, fmt.Sprintf("%s epoch %d -> %d", n.name, n.epoch, e))
		n.epoch = e
	}
	if part, v := n.c.Partitioned(); v != n.partVer {
		names := make([]string, len(part))
		for i, p := range part {
			names[i] = p.String()
		}
		h.events = append(h.events, fmt.Sprintf("%s unheard [%s]", n.name, strings.Join(names, " ")))
		n.partVer = v
	}
}

func (h *harness) flushEvents(b *strings.Builder, stamp bool) {
	for _, e := range h.events {
		if stamp {
			fmt.Fprintf(b, "%s ", fmtTime(h.now))
		}
		fmt.Fprintf(b, "%s\n", e)
	}
	h.events = nil
}

// printQueue prints the queued messages (sorted) and the events.
func (h *harness) printQueue(b *strings.Builder) { h.printQueueFrom(b, 0) }

func (h *harness) printQueueFrom(b *strings.Builder, from int) {
	var lines []string
	for _, q := range h.queue[from:] {
		lines = append(lines, h.fmtMsg(q.src, &q.m))
	}
	sort.Strings(lines)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	h.flushEvents(b, false)
}

func (h *harness) cmdDeliver(b *strings.Builder, c *ddCmd) {
	rounds := 1
	if v, ok := c.KV["rounds"]; ok {
		rounds = int(h.uint(v))
	}
	if c.has("all") {
		rounds = 100
	}
	for r := 0; r < rounds && len(h.queue) > 0; r++ {
		msgs := h.queue
		h.queue = nil
		for _, q := range msgs {
			h.deliver(b, q, nil, false)
		}
		if r+1 < rounds {
			h.flushEvents(b, false)
		}
	}
	if c.has("all") && len(h.queue) > 0 {
		h.fail("still %d messages after 100 rounds", len(h.queue))
	}
	if len(h.queue) > 0 {
		b.WriteString("ready:\n")
	}
	h.printQueue(b)
}

// deliverAll delivers until nothing is queued (run).
func (h *harness) deliverAll(b *strings.Builder, show map[string]bool, stamp bool) {
	for i := 0; len(h.queue) > 0; i++ {
		if i > 100 {
			h.fail("messages keep coming at %s", fmtTime(h.now))
		}
		msgs := h.queue
		h.queue = nil
		for _, q := range msgs {
			h.deliver(b, q, show, stamp)
		}
	}
	h.flushEvents(b, stamp)
}

// deliver hands q to its receivers and prints it (when show lets it).
func (h *harness) deliver(b *strings.Builder, q queued, show map[string]bool, stamp bool) {
	m := q.m
	srcPoP := q.src.pop
	var to, cut []*hnode
	from := srcPoP
	switch {
	case m.Link == LinkPoP:
		for _, n := range h.live() {
			if n.pop != srcPoP || n == q.src {
				continue
			}
			if h.isCut(q.src, n) {
				cut = append(cut, n)
				continue
			}
			to = append(to, n)
		}
	default:
		for _, n := range h.live() {
			if n.pop == srcPoP || (m.Kind == KindState && n.pop != m.To) {
				continue
			}
			if h.isCut(q.src, n) {
				cut = append(cut, n)
				continue
			}
			to = append(to, n)
		}
	}
	var notes []string
	for _, n := range to {
		d := cloneDelta(m.Delta)
		res := n.c.Step(h.nodeNow(n), Message{Link: m.Link, Kind: m.Kind, From: from, Delta: d})
		if s := fmtResult(res); s != "" {
			notes = append(notes, n.name+": "+s)
		}
		h.collect(n)
	}
	key := m.Kind.String()
	if m.Link == LinkPoP {
		key = "pop"
	}
	if show != nil && !show[key] && len(notes) == 0 {
		return
	}
	if stamp {
		fmt.Fprintf(b, "%s ", fmtTime(h.now))
	}
	fmt.Fprintf(b, "%s -> %s", h.fmtMsg(q.src, &m), names(to))
	if len(cut) > 0 {
		fmt.Fprintf(b, " (cut %s)", names(cut))
	}
	b.WriteString("\n")
	for _, s := range notes {
		fmt.Fprintf(b, "  %s\n", s)
	}
}

func names(ns []*hnode) string {
	if len(ns) == 0 {
		return "none"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.name
	}
	return strings.Join(s, " ")
}

func cloneDelta(d *wire.Delta) *wire.Delta {
	if d == nil {
		return nil
	}
	c := *d
	c.Entries = slices.Clone(d.Entries)
	return &c
}

// fmtResult is what a receiver did beyond merging (empty: merged or
// unchanged only).
func fmtResult(r StepResult) string {
	var s []string
	if r.Forged {
		s = append(s, "forged")
	}
	if r.Dropped {
		s = append(s, "dropped")
	}
	a := r.Applied
	for _, f := range []struct {
		name string
		v    int
	}{
		{"stale", a.Stale}, {"ahead", a.Ahead}, {"full", a.Full}, {"unknown-rule", a.UnknownRule},
		{"wrong-scope", a.WrongScope}, {"bad-entry", a.BadEntry}, {"echo", a.Echo},
	} {
		if f.v > 0 {
			s = append(s, fmt.Sprintf("%s=%d", f.name, f.v))
		}
	}
	return strings.Join(s, " ")
}

func (h *harness) cmdCut(c *ddCmd) {
	if c.Name == "heal" && len(c.Args) == 0 {
		h.cut = map[[2]string]bool{}
		return
	}
	if len(c.Args) < 2 {
		h.fail("usage: %s region/pop|node region/pop|node [oneway]", c.Name)
	}
	a, z := h.endpoint(c.Args[0]), h.endpoint(c.Args[1])
	set := func(k [2]string) {
		if c.Name == "cut" {
			h.cut[k] = true
		} else {
			delete(h.cut, k)
		}
	}
	set([2]string{a, z})
	if !c.has("oneway") {
		set([2]string{z, a})
	}
}

// endpoint checks a cut endpoint: a PoP (region/pop) or a node name.
func (h *harness) endpoint(s string) string {
	if strings.Contains(s, "/") {
		return h.popID(s).String()
	}
	return h.node(s).name
}

// isCut reports whether messages from src to dst are lost: a cut between
// their PoPs, or between either node and the other's PoP or node.
func (h *harness) isCut(src, dst *hnode) bool {
	for _, a := range [2]string{src.pop.String(), src.name} {
		for _, z := range [2]string{dst.pop.String(), dst.name} {
			if h.cut[[2]string{a, z}] {
				return true
			}
		}
	}
	return false
}

func (h *harness) cmdJoin(b *strings.Builder, c *ddCmd) {
	n, from := h.node(c.Args[0]), h.node(c.KV["from"])
	mark := len(h.queue)
	for _, d := range from.c.LocalState(h.nodeNow(from)) {
		m := Message{Link: LinkPoP, Kind: KindDelta, Delta: &d}
		st := n.c.MergeState(h.nodeNow(n), cloneDelta(&d))
		fmt.Fprintf(b, "%s state %s", n.name, h.fmtMsg(from, &m))
		if s := fmtResult(StepResult{Applied: st}); s != "" {
			fmt.Fprintf(b, " (%s)", s)
		}
		b.WriteString("\n")
		h.collect(n)
	}
	h.printQueueFrom(b, mark)
}

// cmdForge queues a message as src's transport would carry it: with src's
// PoP as the subject it came through, whatever its sender says.
func (h *harness) cmdForge(b *strings.Builder, c *ddCmd) {
	if len(c.Args) < 3 {
		h.fail("usage: forge node pop|global kind sender=... [epoch=N] [to=r/p] rule/key=count...")
	}
	src := h.node(c.Args[0])
	m := Message{Link: LinkPoP}
	if c.Args[1] == "global" {
		m.Link = LinkGlobal
	}
	kinds := map[string]Kind{"delta": KindDelta, "heartbeat": KindHeartbeat, "sync": KindSync, "state": KindState}
	k, ok := kinds[c.Args[2]]
	if !ok {
		h.fail("unknown kind %q", c.Args[2])
	}
	m.Kind = k
	if v, ok := c.KV["to"]; ok {
		m.To = h.popID(v)
	}
	d := &wire.Delta{Sender: h.replica(c.KV["sender"]), SentAt: h.nodeNow(src)}
	if v, ok := c.KV["epoch"]; ok {
		d.Epoch = h.uint(v)
	}
	for k, v := range c.KV {
		rule, key, ok := strings.Cut(k, "/")
		if !ok {
			continue
		}
		d.Entries = append(d.Entries, crdt.Entry{Rule: rule, Key: key, Window: t0 / int64(ruleWindow), Count: h.uint(v)})
	}
	m.Delta = d
	h.queue = append(h.queue, queued{src: src, m: m})
	h.printQueueFrom(b, len(h.queue)-1)
}

// --- printing

func fmtTime(t int64) string {
	return fmt.Sprintf("t=%.3fs", float64(t-t0)/1e9)
}

// fmtWindow prints a window index relative to t0's window.
func fmtWindow(w int64) string {
	if off := w - t0/int64(ruleWindow); off != 0 {
		return fmt.Sprintf("@%+d", off)
	}
	return ""
}

// fmtMsg prints a message canonically: source node, link, kind, the sender
// when it is not the source node's own identity, the epoch, and the entries
// sorted.
func (h *harness) fmtMsg(src *hnode, m *Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", src.name, m.Link, m.Kind)
	if m.Kind == KindState || m.To != (identity.PoPID{}) {
		fmt.Fprintf(&b, " to=%s", m.To)
	}
	d := m.Delta
	if d == nil {
		b.WriteString(" nil")
		return b.String()
	}
	if d.Sender != src.rep {
		fmt.Fprintf(&b, " as=%s", d.Sender)
	}
	fmt.Fprintf(&b, " e=%d", d.Epoch)
	if m.Reliable {
		b.WriteString(" rel")
	}
	// Heartbeats' rule fingerprints (drift.go) are left out of the
	// transcripts; drift_test.go checks them.
	es := slices.DeleteFunc(slices.Clone(d.Entries), func(e crdt.Entry) bool { return e.Key == fingerprintKey })
	if len(es) > 0 {
		sort.Slice(es, func(i, j int) bool {
			a, z := es[i], es[j]
			if a.Rule != z.Rule {
				return a.Rule < z.Rule
			}
			if a.Key != z.Key {
				return a.Key < z.Key
			}
			return a.Window < z.Window
		})
		parts := make([]string, len(es))
		for i, e := range es {
			parts[i] = fmt.Sprintf("%s/%s%s=%d", e.Rule, e.Key, fmtWindow(e.Window), e.Count)
		}
		fmt.Fprintf(&b, " {%s}", strings.Join(parts, " "))
	}
	return b.String()
}

func (h *harness) cmdView(b *strings.Builder, c *ddCmd) {
	if len(c.Args) != 3 {
		h.fail("usage: view nodes rule key[,key...]")
	}
	for _, key := range strings.Split(c.Args[2], ",") {
		for _, n := range h.nodeList(c.Args[:1]) {
			if !n.alive {
				continue
			}
			v, err := n.n.View(h.nodeNow(n), c.Args[1], key)
			if err != nil {
				h.fail("%v", err)
			}
			fmt.Fprintf(b, "%s %s/%s:", n.name, c.Args[1], key)
			if len(v.Windows) == 0 {
				b.WriteString(" -")
			}
			for _, w := range v.Windows {
				reps := make([]string, 0, len(w.Replicas))
				for r, cnt := range w.Replicas {
					reps = append(reps, fmt.Sprintf("%s=%d", r, cnt))
				}
				sort.Strings(reps)
				fmt.Fprintf(b, " w%+d total=%d {%s}", w.Index-t0/int64(ruleWindow), w.Total, strings.Join(reps, " "))
			}
			b.WriteString("\n")
		}
	}
}

func (h *harness) status(b *strings.Builder, n *hnode) {
	c := n.c
	now := h.nodeNow(n)
	state := "live"
	if !n.alive {
		state = "crashed"
	}
	fmt.Fprintf(b, "%s %s %s epoch=%d members=[%s]\n", n.name, n.rep, state, c.Epoch(), strings.Join(c.Members(), " "))
	part, v := c.Partitioned()
	ps := make([]string, len(part))
	for i, p := range part {
		ps[i] = p.String()
	}
	fmt.Fprintf(b, "  partitioned=[%s] version=%d\n", strings.Join(ps, " "), v)
	for _, rp := range c.RemotePoPs(now) {
		heard := "never"
		if rp.LastHeard != 0 {
			heard = fmtTime(rp.LastHeard)
		}
		fmt.Fprintf(b, "  %s heard=%s partitioned=%t epoch=%d\n", rp.PoPID, heard, rp.Partitioned, rp.Epoch)
	}
	var st []string
	sv := reflect.ValueOf(c.Stats())
	for i := 0; i < sv.NumField(); i++ {
		if x := sv.Field(i).Uint(); x != 0 {
			st = append(st, fmt.Sprintf("%s=%d", sv.Type().Field(i).Tag.Get("json"), x))
		}
	}
	fmt.Fprintf(b, "  stats %s\n", strings.Join(st, " "))
}

// cmdOwners prints, for each key, the nodes that consider themselves its
// publisher (Core.ownsKey over their own membership view).
func (h *harness) cmdOwners(b *strings.Builder, c *ddCmd) {
	if len(c.Args) != 2 {
		h.fail("usage: owners nodes key[,key...]")
	}
	ns := slices.DeleteFunc(h.nodeList(c.Args[:1]), func(n *hnode) bool { return !n.alive })
	for _, key := range strings.Split(c.Args[1], ",") {
		var owners []*hnode
		for _, n := range ns {
			if task, ok := strings.CutPrefix(key, "task:"); ok && n.c.ownsTask(task) || !ok && n.c.ownsKey(key) {
				owners = append(owners, n)
			}
		}
		fmt.Fprintf(b, "%s: %s\n", key, names(owners))
	}
}
