package sim

import (
	"testing"
	"time"
)

// benchScenario is 3 regions, 8 nodes, 2 s of simulated time at 6M
// requests/s: 100 global keys with a Zipf spread, the hottest ones far over
// their limit, and 1000 client IPs on anycast, each at twice its pop-scope
// per-IP limit; a partition half way.
const benchScenario = `
name: bench-3-regions-8-nodes
seed: 7
duration: 2s
topology:
  - {region: eu, pops: [{name: ams, nodes: 3}]}
  - {region: us, pops: [{name: iad, nodes: 3}]}
  - {region: ap, pops: [{name: sin, nodes: 2}]}
network:
  intra_pop: {latency: 1ms, jitter: 200us}
  inter_region: {latency: 80ms, jitter: 10ms, loss: 0.01}
rules:
  - {name: api, limit: 20000, window: 1s, scope: global}
  - {name: per-ip, limit: 1000, window: 1s, scope: pop}
traffic:
  - {rule: api, keys: 100, spread: zipf, zipf_s: 1.2, rate: 4000000/s}
  - {rule: per-ip, keys: 1000, anycast: true, rate: 2000000/s}
events:
  - {at: 1s, partition: [[eu], [us, ap]]}
`

func benchRun(b *testing.B, opts Options) {
	sc, err := Parse([]byte(benchScenario))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var reqs uint64
	start := time.Now()
	for b.Loop() {
		res, err := Run(sc, opts)
		if err != nil {
			b.Fatal(err)
		}
		reqs += res.Report.Requests
	}
	b.ReportMetric(float64(reqs)/time.Since(start).Seconds(), "sim-req/s")
}

// BenchmarkSim measures simulated requests per second of a 3-region, 8-node
// fleet, each request also decided by the central reference node.
func BenchmarkSim(b *testing.B) { benchRun(b, Options{}) }

// BenchmarkSimFleetOnly is BenchmarkSim without the central reference node.
func BenchmarkSimFleetOnly(b *testing.B) { benchRun(b, Options{NoCentral: true}) }

// BenchmarkDecideFloor is the node core's own cost for the same kind of
// requests (one node, 100 global keys): the floor under BenchmarkSim's
// per-request cost.
func BenchmarkDecideFloor(b *testing.B) {
	sc, err := Parse([]byte(benchScenario))
	if err != nil {
		b.Fatal(err)
	}
	e, err := newEngine(sc, Options{NoCentral: true})
	if err != nil {
		b.Fatal(err)
	}
	n := e.nodes[0].n
	keys := e.sources[0].keys
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := n.Decide(Epoch+int64(i)*200, "api", keys[i%len(keys)].key, 1); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
