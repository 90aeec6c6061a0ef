package repl

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
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
			ids := make([]PoPID, pops)
			for i := range ids {
				ids[i] = PoPID{Region: fmt.Sprintf("r%d", i%6), PoP: fmt.Sprintf("p%03d", i)}
			}
			cfg := DefaultConfig()
			cfg.Node, cfg.PoPLink, cfg.GlobalLink = testNode(b, ams1), true, true
			cfg.MaxPoPs = pops
			cfg.ExpectedPoPs = ids
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ms := int64(time.Millisecond)
			now := int64(1_000_000) * ms
			c.Tick(now)
			c.SetMembers(now, []string{"a2#1"})
			msgs := make([]Message, pops)
			deltas := make([]crdt.Delta, pops)
			for i, id := range ids {
				deltas[i] = crdt.Delta{Sender: crdt.Replica{Region: id.Region, PoP: id.PoP, Node: "x", Incarnation: 1}, Epoch: 1}
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
