package sim_test

import (
	"fmt"
	"log"

	"github.com/geolimit/geolimit/sim"
)

// Two regions cut apart for 20 one-second windows under the keep policy:
// each side spends the whole limit, so the fleet admits twice the limit.
// A phase's figures are over its instants, whose trailing window may reach
// back into the phase before: the first second after the heal still holds
// the cut's admits.
func ExampleRun() {
	sc, err := sim.Parse([]byte(`
name: example
seed: 1
duration: 30s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 2}]}
network:
  inter_region: {latency: 5ms, jitter: 1ms}
replication: {flush_interval: 5ms, peer_timeout: 500ms}
rules:
  - {name: api, limit: 100, window: 1s, on_partition: keep}
traffic:
  - {rule: api, rate: 400/s}
events:
  - {at: 5s, partition: [[eu], [us]]}
  - {at: 25s, heal: true}
`))
	if err != nil {
		log.Fatal(err)
	}
	res, err := sim.Run(sc, sim.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range res.Report.Phases {
		fmt.Printf("%-11s p99 admitted/limit %.1f\n", p.Name, p.P99AdmittedRatio)
	}
	// Output:
	// healthy     p99 admitted/limit 1.0
	// partitioned p99 admitted/limit 2.0
	// healed      p99 admitted/limit 1.8
}
