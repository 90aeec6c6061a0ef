package repl

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// snode is one lone-PoP node of the startup tests.
type snode struct {
	c  *Core
	id identity.PoPID
}

// startupNet delivers what the nodes make ready to the others, the way NATS
// does (state only to its PoP), until nothing is left; drop filters.
func startupNet(now int64, drop func(m Message) bool, nodes ...*snode) {
	for range 20 {
		moved := false
		for _, from := range nodes {
			for _, m := range from.c.Ready() {
				if m.Link != LinkGlobal || (drop != nil && drop(m)) {
					continue
				}
				for _, to := range nodes {
					if to == from || (m.Kind == KindState && to.id != m.To) {
						continue
					}
					moved = true
					in := m
					in.From = from.id
					to.c.Step(now, in)
				}
			}
		}
		if !moved {
			return
		}
	}
}

func startupCore(t *testing.T, r identity.Replica, wait time.Duration, expected ...identity.PoPID) *snode {
	t.Helper()
	c, err := New(Config{Node: testNode(t, r).Link(), GlobalLink: true, Relay: true, Settings: Settings{FlushInterval: 10 * time.Millisecond,
		AntiEntropyInterval: time.Hour, PeerTimeout: time.Second, ExpectedPoPs: popNames(expected...), StartupSync: wait, SparseUpdates: new(bool)}})
	if err != nil {
		t.Fatal(err)
	}
	return &snode{c: c, id: r.PoPID}
}

func globalTotal(t *testing.T, n *snode, now int64) uint64 {
	t.Helper()
	v, err := popNode(n.c).View(now, "api", "k")
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, w := range v.Windows {
		sum += w.Total
	}
	return sum
}

// TestStartupSync restarts a lone-PoP node: the restarted node is unsynced
// until the other PoP has relayed its former epoch's counts and sent its
// marker (at once when the other PoP is expected), or StartupSync passed.
func TestStartupSync(t *testing.T) {
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	const wait = 5 * time.Second
	for _, tc := range []struct {
		name      string
		expected  bool
		noMarkers bool // the other PoP runs a version without markers
		// want: synced before the wait ends; timed out at the end.
		early, timedOut bool
	}{
		{"expected pop answers", true, false, true, false},
		{"no expected pops: the whole wait", false, false, false, true},
		{"expected pop without markers", true, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var exp []identity.PoPID
			if tc.expected {
				exp = []identity.PoPID{iad}
			}
			b := startupCore(t, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "b1", Incarnation: 1}, 0, ams)
			a1 := startupCore(t, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}, wait, exp...)
			now := t0
			var drop func(Message) bool
			if tc.noMarkers {
				drop = func(m Message) bool { return m.Kind == KindState && len(m.Delta.Entries) == 0 }
			}
			step := func(ns ...*snode) {
				now += int64(10 * time.Millisecond)
				for _, n := range ns {
					n.c.Tick(now)
				}
				startupNet(now, drop, ns...)
			}
			for range 600 { // a1's startup sync ends (timed out or answered)
				step(a1, b)
			}
			if !popNode(a1.c).Synced() {
				t.Fatal("first incarnation still unsynced after 6s")
			}
			for range 30 {
				if _, err := popNode(a1.c).Decide(now, "api", "k", 1); err != nil {
					t.Fatal(err)
				}
			}
			for range 10 {
				step(a1, b)
			}
			if got := globalTotal(t, b, now); got != 30 {
				t.Fatalf("iad holds %d of ams's counts, want 30", got)
			}

			// a1 dies; a2 is its next incarnation.
			a2 := startupCore(t, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 2}, wait, exp...)
			if popNode(a2.c).Synced() {
				t.Fatal("a restarted node is synced before its first tick")
			}
			start := now
			for popNode(a2.c).Synced() == false && now-start < int64(2*wait) {
				step(a2, b)
			}
			took := time.Duration(now - start)
			st := a2.c.Startup()
			if !st.Synced {
				t.Fatalf("not synced after %s: %+v", took, st)
			}
			if got := globalTotal(t, a2, now); got != 30 {
				t.Fatalf("the restarted node holds %d of its former counts, want 30", got)
			}
			if tc.early && took >= wait/2 {
				t.Errorf("synced after %s, want well before the %s bound", took, wait)
			}
			if !tc.early && took < wait {
				t.Errorf("synced after %s, before the %s bound", took, wait)
			}
			if st.TimedOut != tc.timedOut {
				t.Errorf("timed out %v, want %v", st.TimedOut, tc.timedOut)
			}
			if !tc.noMarkers && b.c.Stats().Markers == 0 {
				t.Error("iad sent no marker")
			}
		})
	}
}

// TestStartupSyncOff: with StartupSync 0 a node is synced from the start and
// its sync requests carry no control entry (the simulator's nodes).
func TestStartupSyncOff(t *testing.T) {
	n := startupCore(t, ams1, 0)
	if !popNode(n.c).Synced() {
		t.Fatal("unsynced with StartupSync 0")
	}
	n.c.Tick(t0)
	for _, m := range n.c.Ready() {
		if m.Kind == KindSync && len(m.Delta.Entries) != 0 {
			t.Fatalf("sync request with entries %v", m.Delta.Entries)
		}
	}
}

// A marker for another epoch (a former incarnation's answer arriving late)
// does not end the wait.
func TestStartupMarkerOfOtherEpoch(t *testing.T) {
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	n := startupCore(t, ams1, time.Minute, iad)
	n.c.Tick(t0)
	for _, inc := range []uint64{7, ams1.Incarnation} {
		n.c.Step(t0, Message{Link: LinkGlobal, Kind: KindState, From: iad,
			Delta: &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, inc), SentAt: t0, Epoch: inc}})
		if got, want := popNode(n.c).Synced(), inc == ams1.Incarnation; got != want {
			t.Fatalf("marker of epoch %d: synced %v, want %v", inc, got, want)
		}
	}
}
