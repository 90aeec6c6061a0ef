package repl

import (
	"math"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

func driftCore(t *testing.T, r identity.Replica, rules []pop.Rule) *snode {
	t.Helper()
	n, err := pop.New(pop.Config{Self: r, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Node: n.Link(), GlobalLink: true, Relay: true, Settings: Settings{FlushInterval: 10 * time.Millisecond,
		AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return &snode{c: c, id: r.PoPID}
}

// Two PoPs whose rule "api" has another window, and a rule only one has,
// see it in each other's heartbeats; a PoP whose clock runs 30s ahead is
// reported skewed with its offset.
func TestDriftDetected(t *testing.T) {
	rules := func(w time.Duration, extra bool) []pop.Rule {
		rs := []pop.Rule{
			{Name: "api", Limit: 100, Window: w, Cost: 1, Scope: pop.ScopeGlobal},
			{Name: "same", Limit: 5, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal},
			{Name: "ip", Limit: 5, Window: time.Minute, Cost: 1, Scope: pop.ScopePoP},
		}
		if extra {
			rs = append(rs, pop.Rule{Name: "only-here", Limit: 5, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal})
		}
		return rs
	}
	a := driftCore(t, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}, rules(10*time.Second, false))
	b := driftCore(t, identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "b1", Incarnation: 1}, rules(20*time.Second, true))
	const skew = int64(30 * time.Second)
	now := t0
	for range 200 { // 2s: several heartbeats each way; b's clock is 30s ahead
		now += int64(10 * time.Millisecond)
		a.c.Tick(now)
		b.c.Tick(now + skew)
		for _, m := range b.c.Ready() {
			if m.Link == LinkGlobal {
				m.From = b.id
				a.c.Step(now+int64(time.Millisecond), m)
			}
		}
		for _, m := range a.c.Ready() {
			if m.Link == LinkGlobal {
				m.From = a.id
				b.c.Step(now+skew+int64(time.Millisecond), m)
			}
		}
	}
	da, _ := a.c.Drift()
	if len(da) != 1 || da[0].PoPID != b.id {
		t.Fatalf("ams's drift view %+v, want one entry for iad", da)
	}
	want := []RuleMismatch{{Rule: "api", PeerWindowMS: 20000, WindowMS: 10000}, {Rule: "only-here", Absent: true, PeerWindowMS: 60000}}
	if got := da[0].Mismatches; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ams sees mismatches %+v, want %+v", got, want)
	}
	// b's heartbeats take 1ms to arrive: the estimate is low by that much.
	if off := da[0].ClockOffset; off != time.Duration(skew)-time.Millisecond || !da[0].Skewed {
		t.Fatalf("iad's clock offset %s (skewed %v), want 29.999s, skewed", off, da[0].Skewed)
	}
	db, _ := b.c.Drift()
	if len(db) != 1 || len(db[0].Mismatches) != 1 || db[0].Mismatches[0].Rule != "api" {
		t.Fatalf("iad's drift view %+v, want the api mismatch only", db)
	}
	if off := db[0].ClockOffset; off != -time.Duration(skew)-time.Millisecond || !db[0].Skewed {
		t.Fatalf("ams's clock offset seen from iad %s, want -30.001s", off)
	}
}

// Peers without fingerprints (an older version) and clocks within the max
// skew report nothing.
func TestDriftQuiet(t *testing.T) {
	a := driftCore(t, ams1, testRules())
	a.c.Tick(t0)
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	_, v0 := a.c.Drift()
	for i := range 5 {
		at := t0 + int64(i)*int64(250*time.Millisecond)
		a.c.Step(at+int64(time.Second), heartbeatFrom(iad, at))
	}
	d, v := a.c.Drift()
	if len(d) != 1 || d[0].Skewed || len(d[0].Mismatches) != 0 || d[0].ClockOffset != -time.Second || v != v0 {
		t.Fatalf("drift %+v (version %d -> %d), want an offset of -1s and nothing else", d, v0, v)
	}
}

// A heartbeat split into parts shows each rule in one part only: a
// mismatch shown by one part stands through the others, is cleared when an
// entry shows the rule alike, and is forgotten once no heartbeat has shown
// it for driftExpiry peer timeouts. An absurd SentAt is reported as a large
// offset, skewed, not wrapped.
func TestDriftSplitHeartbeat(t *testing.T) {
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	a := driftCore(t, ams1, rules)
	a.c.Tick(t0)
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	fp := func(rule string, w time.Duration) crdt.Entry {
		r := pop.Rule{Name: rule, Limit: 100, Window: w, Cost: 1, Scope: pop.ScopeGlobal}
		return crdt.Entry{Rule: rule, Key: fingerprintKey, Window: w.Milliseconds(), Count: r.Fingerprint()}
	}
	part := func(at int64, es ...crdt.Entry) {
		m := heartbeatFrom(iad, at)
		m.Delta.Entries = es
		a.c.Step(at, m)
	}
	mism := func() []RuleMismatch {
		d, _ := a.c.Drift()
		if len(d) != 1 {
			t.Fatalf("drift %+v, want iad only", d)
		}
		return d[0].Mismatches
	}
	at := t0
	for range 3 { // each heartbeat in two parts
		at += int64(250 * time.Millisecond)
		part(at, fp("api", 20*time.Second))
		part(at, fp("other", time.Minute))
		if got := mism(); len(got) != 2 || got[0].Rule != "api" || got[1].Rule != "other" {
			t.Fatalf("mismatches %+v, want api and other through both parts", got)
		}
	}
	_, v := a.c.Drift()
	part(at, fp("api", 20*time.Second))
	if _, v2 := a.c.Drift(); v2 != v {
		t.Fatalf("drift version %d -> %d: nothing changed", v, v2)
	}
	at += int64(250 * time.Millisecond)
	part(at, fp("api", 10*time.Second)) // the peer fixed api
	if got := mism(); len(got) != 1 || got[0].Rule != "other" {
		t.Fatalf("mismatches %+v, want other only", got)
	}
	at += int64(3 * time.Second) // other not shown for over driftExpiry peer timeouts
	part(at, fp("api", 10*time.Second))
	if got := mism(); len(got) != 0 {
		t.Fatalf("mismatches %+v, want none", got)
	}
	m := heartbeatFrom(iad, math.MaxInt64)
	a.c.Step(at, m)
	d, _ := a.c.Drift()
	if !d[0].Skewed || d[0].ClockOffset <= 0 {
		t.Fatalf("an absurd clock shows as %+v, want a large positive offset, skewed", d[0])
	}
}
