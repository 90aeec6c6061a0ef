package repl

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// BenchmarkStepHeartbeats steps a node of a 300-PoP fleet with heartbeats
// from the other PoPs at jittered ages, the receive path's fixed cost per
// message. "kept" is the Core as it is; "walk" drops the kept view of the
// remote PoPs before each message, so that every latency raise walks all of
// them: the baseline the kept view is measured against.
func BenchmarkStepHeartbeats(b *testing.B) {
	for _, walk := range []bool{false, true} {
		name := "kept"
		if walk {
			name = "walk"
		}
		b.Run(name, func(b *testing.B) {
			const pops = 300
			ids := make([]identity.PoPID, pops)
			for i := range ids {
				ids[i] = identity.PoPID{Region: fmt.Sprintf("r%d", i%6), PoP: fmt.Sprintf("p%03d", i)}
			}
			cfg := Config{Settings: DefaultSettings()}
			cfg.Node, cfg.PoPLink, cfg.GlobalLink = testNode(b, ams1).Link(), true, true
			cfg.MaxPoPs = pops
			cfg.ExpectedPoPs = popNames(ids...)
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ms := int64(time.Millisecond)
			now := int64(1_000_000) * ms
			c.Tick(now)
			c.SetMembers(now, []string{"a2#1"})
			msgs := make([]Message, pops)
			deltas := make([]wire.Delta, pops)
			for i, id := range ids {
				deltas[i] = wire.Delta{Sender: identity.Replica{PoPID: id, Node: "x", Incarnation: 1}, Epoch: 1}
				msgs[i] = Message{Link: LinkGlobal, Kind: KindHeartbeat, From: id, Delta: &deltas[i]}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now += 10_000 // 100 000 messages a second
				if now >= c.Next() {
					c.Tick(now)
				}
				j := i % pops
				deltas[j].SentAt = now - 50*ms - int64(rng.IntN(20))*ms
				if walk {
					c.remote.ok = false
				}
				c.Step(now, msgs[j])
				i++
			}
		})
	}
}

// BenchmarkAntiEntropyStall ticks a node of 100k keys through one
// anti-entropy interval (5s, in 10ms ticks of simulated time) and times each
// tick with the encoding of what it made ready, as the daemon's replication
// loop runs it: max-tick-ms is the longest burst of work the loop does at
// once (which takes a core from the decisions), total-ms the work of the
// whole interval.
func BenchmarkAntiEntropyStall(b *testing.B) {
	n, err := pop.New(pop.Config{Self: ams1, Rules: []pop.Rule{
		{Name: "api", Limit: 1000, Window: time.Hour, Cost: 1, Scope: pop.ScopeGlobal}}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Settings: DefaultSettings()}
	cfg.Node, cfg.PoPLink, cfg.GlobalLink = n.Link(), true, true
	cfg.FlushInterval, cfg.AntiEntropyInterval, cfg.PeerTimeout = 50*time.Millisecond, 5*time.Second, 10*time.Second
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ms := int64(time.Millisecond)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	c.Tick(now)
	c.SetMembers(now, []string{"a2#1"})
	for i := range 100_000 {
		if _, err := n.Decide(now, "api", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), 1); err != nil {
			b.Fatal(err)
		}
	}
	var worst, total time.Duration
	rounds := -1 // the first interval, which flushes every key, is not timed
	for b.Loop() {
		end := now + int64(cfg.AntiEntropyInterval)
		for ; now < end; now += 10 * ms {
			if rounds < 0 {
				c.Tick(now)
				c.Ready()
				continue
			}
			t0 := time.Now()
			c.Tick(now)
			for _, m := range c.Ready() {
				if m.Delta == nil {
					continue
				}
				if _, err := wire.Encode(m.Delta, 0); err != nil {
					b.Fatal(err)
				}
			}
			d := time.Since(t0)
			worst, total = max(worst, d), total+d
		}
		rounds++
	}
	if rounds < 1 {
		b.Skip("one interval is the untimed warm-up: run at least 2 (-benchtime 2x)")
	}
	b.ReportMetric(float64(worst)/1e6, "max-tick-ms")
	b.ReportMetric(float64(total)/1e6/float64(rounds), "total-ms")
}

// BenchmarkStepFirstHeard steps a node of a fleet of 1 000 expected PoPs
// with the first heartbeat of each, as at a cold start of the fleet: every
// PoP joins the view of the PoPs that count (allowance.go), which once
// cost a walk over every PoP each. ns/op is per fleet heard.
func BenchmarkStepFirstHeard(b *testing.B) {
	const pops = 1000
	ids := make([]identity.PoPID, pops)
	for i := range ids {
		ids[i] = identity.PoPID{Region: fmt.Sprintf("r%d", i%25), PoP: fmt.Sprintf("p%04d", i)}
	}
	msgs := make([]Message, pops)
	deltas := make([]wire.Delta, pops)
	for i, id := range ids {
		deltas[i] = wire.Delta{Sender: identity.Replica{PoPID: id, Node: "x", Incarnation: 1}, Epoch: 1}
		msgs[i] = Message{Link: LinkGlobal, Kind: KindHeartbeat, From: id, Delta: &deltas[i]}
	}
	node := testNode(b, ams1).Link()
	ms := int64(time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		cfg := Config{Settings: DefaultSettings()}
		cfg.Node, cfg.PoPLink, cfg.GlobalLink = node, true, true
		cfg.MaxPoPs = pops
		cfg.ExpectedPoPs = popNames(ids...)
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		now := int64(1_000_000) * ms
		c.Tick(now)
		c.SetMembers(now, []string{"a2#1"})
		b.StartTimer()
		for j := range msgs {
			now += 10_000
			deltas[j].SentAt = now - 50*ms - int64(j%20)*ms
			c.Step(now, msgs[j])
		}
	}
}
