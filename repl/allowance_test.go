package repl

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// The Core tells its node the near-limit allowance: the replicas that may
// admit (members times the PoPs that count) and the horizon measured from
// the age of what arrives.
func TestAllowanceFollowsMembersPeersAndLag(t *testing.T) {
	n := testNode(t, ams1)
	cfg := Config{Settings: DefaultSettings()}
	cfg.Node, cfg.PoPLink, cfg.GlobalLink = n.Link(), true, true
	cfg.PeerTimeout = time.Second
	cfg.ExpectedPoPs = []string{"us/iad", "ap/sin"}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms := int64(time.Millisecond)
	now := int64(1_000_000) * ms
	c.Tick(now)
	c.SetMembers(now, []string{"a2#1"})
	fl, sd, hb := 50*time.Millisecond, 5*time.Millisecond, 250*time.Millisecond
	want := func(what string, pa, ga pop.Allowance) {
		t.Helper()
		gp, gg := n.Link().AllowanceOf(pop.ScopePoP), n.Link().AllowanceOf(pop.ScopeGlobal)
		if pa.Replicas() < 2 || pa.Horizon == 0 {
			pa = pop.Allowance{}
		}
		if gp != pa || gg != ga {
			t.Fatalf("%s: pop %+v global %+v, want %+v and %+v", what, gp, gg, pa, ga)
		}
	}
	// Nothing heard yet: the expected PoPs count, at a heartbeat's lag.
	want("cold", pop.Allowance{}, pop.Allowance{Horizon: hb + fl + sd, Members: 2, PoPs: 3})

	member := func(at, sentAt int64) {
		c.Step(at, Message{Link: LinkPoP, From: c.selfPoP, Delta: &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a2", Incarnation: 1}, SentAt: sentAt, Epoch: c.Epoch()}})
	}
	beat := func(at, sentAt int64, region, name string) {
		id := identity.PoPID{Region: region, PoP: name}
		c.Step(at, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: id, Delta: &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: region, PoP: name}, Node: "x", Incarnation: 1}, SentAt: sentAt, Epoch: 1}})
	}
	member(now, now-ms)
	beat(now, now-80*ms, "us", "iad")
	// sin is still unheard: its lag is a heartbeat interval's.
	want("iad heard", pop.Allowance{Horizon: time.Millisecond, Members: 2, PoPs: 1}, pop.Allowance{Horizon: hb + fl + sd, Members: 2, PoPs: 3})
	beat(now, now-120*ms, "ap", "sin")
	want("both heard", pop.Allowance{Horizon: time.Millisecond, Members: 2, PoPs: 1}, pop.Allowance{Horizon: 120*time.Millisecond + fl + sd, Members: 2, PoPs: 3})

	// A slower message raises the lag at once; faster ones lower it
	// gradually; a sender whose clock runs far behind cannot push it past
	// the peer timeout.
	t1 := now + 10*ms
	beat(t1, t1-200*ms, "ap", "sin")
	want("slower", pop.Allowance{Horizon: time.Millisecond, Members: 2, PoPs: 1}, pop.Allowance{Horizon: 200*time.Millisecond + fl + sd, Members: 2, PoPs: 3})
	for i := range 40 {
		at := t1 + int64(i+1)*ms
		beat(at, at-100*ms, "ap", "sin")
		beat(at, at-80*ms, "us", "iad")
	}
	c.Tick(c.nextHB) // a peer check recomputes
	g := n.Link().AllowanceOf(pop.ScopeGlobal).Horizon - fl - sd
	if g <= 100*time.Millisecond || g >= 110*time.Millisecond {
		t.Fatalf("after 40 faster messages the lag is %s, want just above 100ms", g)
	}
	t2 := c.nextHB
	beat(t2, t2-10*time.Second.Nanoseconds(), "ap", "sin")
	want("skewed", pop.Allowance{Horizon: time.Millisecond, Members: 2, PoPs: 1}, pop.Allowance{Horizon: time.Second + fl + sd, Members: 2, PoPs: 3})

	// sin falls silent: partitioned, it counts no more, nor does its lag.
	for at := t2; at <= t2+2*time.Second.Nanoseconds(); at += int64(hb) {
		beat(at, at-80*ms, "us", "iad")
		member(at, at-ms)
		c.Tick(at)
	}
	if got := n.Partition(t2 + 2*time.Second.Nanoseconds()).Unheard; len(got) != 1 || got[0] != "ap/sin" {
		t.Fatalf("unheard %v, want [ap/sin]", got)
	}
	ga := n.Link().AllowanceOf(pop.ScopeGlobal)
	if ga.Replicas() != 4 || ga.Horizon < 80*time.Millisecond+fl+sd || ga.Horizon > 90*time.Millisecond+fl+sd {
		t.Fatalf("with sin partitioned: %+v, want 4 replicas at about 80ms+%s", ga, fl+sd)
	}
	if p, g := c.Allowance(); p != n.Link().AllowanceOf(pop.ScopePoP) || g != ga {
		t.Fatalf("Allowance() = %+v, %+v", p, g)
	}
}

// A node alone in its PoP publishes its own totals at its flush: the global
// horizon is the lag alone, and no pop-scope split.
func TestAllowanceAloneInPoP(t *testing.T) {
	n := testNode(t, ams1)
	cfg := Config{Settings: DefaultSettings()}
	cfg.Node, cfg.GlobalLink = n.Link(), true
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(time.Hour)
	c.Tick(now)
	c.Step(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: identity.PoPID{Region: "us", PoP: "iad"}, Delta: &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}, SentAt: now - int64(70*time.Millisecond), Epoch: 1}})
	// Its reach is a member's of a PoP of several nodes: a flush slot and
	// the speaker's delay more.
	if got := n.Link().AllowanceOf(pop.ScopeGlobal); got != (pop.Allowance{Horizon: 70 * time.Millisecond, Members: 1, PoPs: 2, Reach: 125 * time.Millisecond}) {
		t.Fatalf("global %+v", got)
	}
	if got := n.Link().AllowanceOf(pop.ScopePoP); got != (pop.Allowance{}) {
		t.Fatalf("pop %+v", got)
	}
}

// NearLimitAllowance false leaves the node deciding on its estimate alone.
func TestNoAllowance(t *testing.T) {
	n := testNode(t, ams1)
	cfg := Config{Settings: DefaultSettings()}
	off := false
	cfg.Node, cfg.PoPLink, cfg.GlobalLink, cfg.NearLimitAllowance = n.Link(), true, true, &off
	cfg.ExpectedPoPs = []string{"us/iad"}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := int64(time.Hour)
	c.Tick(now)
	c.SetMembers(now, []string{"a2#1"})
	c.Step(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: identity.PoPID{Region: "us", PoP: "iad"}, Delta: &wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}, SentAt: now - int64(70*time.Millisecond), Epoch: 1}})
	if g, p := n.Link().AllowanceOf(pop.ScopeGlobal), n.Link().AllowanceOf(pop.ScopePoP); g != (pop.Allowance{}) || p != (pop.Allowance{}) {
		t.Fatalf("allowance %+v %+v with the allowance off", g, p)
	}
}

// Between latency samples the Core keeps its view of the remote PoPs that
// count rather than walking them all per message. Whatever arrives, in
// whatever order, with PoPs falling silent and coming back, the kept view
// must be the one a fresh walk finds.
func TestRemoteViewMatchesAFullWalk(t *testing.T) {
	n := testNode(t, ams1)
	cfg := Config{Settings: DefaultSettings()}
	cfg.Node, cfg.PoPLink, cfg.GlobalLink = n.Link(), true, true
	cfg.PeerTimeout = time.Second
	ids := []identity.PoPID{{Region: "us", PoP: "iad"}, {Region: "ap", PoP: "sin"}, {Region: "us", PoP: "sjc"}, {Region: "eu", PoP: "fra"}, {Region: "sa", PoP: "gru"}}
	cfg.ExpectedPoPs = popNames(ids[:3]...) // fra and gru are not expected
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms := int64(time.Millisecond)
	now := int64(1_000_000) * ms
	c.Tick(now)
	c.SetMembers(now, []string{"a2#1"})
	rng := rand.New(rand.NewPCG(1, 2))
	kept, walks := 0, 0
	for i := range 20000 {
		switch x := rng.IntN(100); {
		case x < 2:
			now += int64(rng.IntN(1500)) * ms // long enough to fall silent
		default:
			now += int64(rng.IntN(20)) * ms
		}
		if now >= c.Next() {
			c.Tick(now)
		}
		// Some PoPs are quiet for a while: they fall silent and come back.
		id := ids[rng.IntN(len(ids))]
		if (i/3000)%2 == 1 && id.PoP == "sin" {
			continue
		}
		age := int64(rng.IntN(300)) * ms
		c.Step(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: id, Delta: &wire.Delta{Sender: identity.Replica{PoPID: id, Node: "x", Incarnation: 1}, SentAt: now - age, Epoch: 1}})

		r := c.remote
		if r.ok && now >= r.at && now <= r.until && r.part == c.partVersion {
			kept++
		}
		got := c.remoteView(now, false)
		saved := c.remote
		want := c.remoteView(now, true)
		c.remote = saved
		walks++
		if got.pops != want.pops || got.far != want.far {
			t.Fatalf("message %d at %d: kept view %d PoPs at %d, a walk finds %d at %d", i, now, got.pops, got.far, want.pops, want.far)
		}
	}
	if kept < walks/2 {
		t.Fatalf("the view was kept for %d of %d messages, want most", kept, walks)
	}
}
