package repl

import (
	"math"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// Three PoPs, one of them 4s ahead and one 100ms behind: every node agrees
// on the lower median of the clocks (ams's here); the heartbeats take 1ms
// both ways (the offsets the PoPs tell each other cancel it; a change
// within correctionStep is not followed). The clock
// 100ms off alone is within minCorrection.
func TestFleetClockAgreed(t *testing.T) {
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	ids := []crdt.PoPID{{Region: "eu", PoP: "ams"}, {Region: "eu", PoP: "fra"}, {Region: "us", PoP: "iad"}}
	skews := []int64{0, -int64(100 * time.Millisecond), int64(4 * time.Second)}
	var ns []*snode
	for i, id := range ids {
		ns = append(ns, driftCore(t, crdt.Replica{PoPID: id, Node: "n", Incarnation: uint64(i + 1)}, rules))
	}
	now := t0
	for range 200 {
		now += int64(10 * time.Millisecond)
		for i, n := range ns {
			n.c.Tick(now + skews[i])
		}
		for i, n := range ns {
			for _, m := range n.c.Ready() {
				if m.Link != LinkGlobal {
					continue
				}
				m.From = n.id
				for j, o := range ns {
					if j != i {
						o.c.Step(now+skews[j]+int64(time.Millisecond), m)
					}
				}
			}
		}
	}
	// The fleet clock: each node's clock plus its correction.
	for i, n := range ns {
		fleet := skews[i] + int64(n.c.ClockCorrection())
		if i == 0 && n.c.ClockCorrection() != 0 {
			t.Errorf("ams corrects by %s; it is the median clock", n.c.ClockCorrection())
		}
		if i == 2 && (fleet < -int64(2*time.Millisecond) || fleet > int64(2*time.Millisecond)) {
			t.Errorf("iad's fleet clock is %s off ams's, want within 2ms (correction %s)", time.Duration(fleet), n.c.ClockCorrection())
		}
	}
	if c := ns[1].c.ClockCorrection(); c != 0 {
		t.Errorf("fra corrects by %s; its median offset (100ms) is within minCorrection", c)
	}
}

// A PoP that claims an absurd clock and an absurd estimate of ours moves the
// correction by at most maxCorrection, and nothing wraps.
func TestFleetClockBounded(t *testing.T) {
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	a := driftCore(t, crdt.Replica{PoPID: crdt.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}, rules)
	liar := crdt.Replica{PoPID: crdt.PoPID{Region: "us", PoP: "iad"}, Node: "x", Incarnation: 1}
	now := t0
	for i := range 10 {
		now += int64(100 * time.Millisecond)
		a.c.Tick(now)
		sent := int64(1) // far in the past
		if i == 0 {
			sent = math.MaxInt64 // far ahead
		}
		a.c.Step(now, Message{Link: LinkGlobal, Kind: KindHeartbeat, From: liar.PoPID, Delta: &crdt.Delta{
			Sender: liar, SentAt: sent, Epoch: 1,
			Entries: []crdt.Entry{{Rule: "eu/ams", Key: offsetKey, Window: math.MaxInt64}}}})
		if c := a.c.ClockCorrection(); c < -time.Duration(maxCorrection) || c > time.Duration(maxCorrection) {
			t.Fatalf("correction %s beyond %s", c, time.Duration(maxCorrection))
		}
	}
	if c := a.c.ClockCorrection(); c != -time.Duration(maxCorrection) {
		t.Fatalf("correction %s, want the bound -%s", c, time.Duration(maxCorrection))
	}
}
