package sim

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const concScenario = `
name: conc
seed: 3
duration: 30s
topology:
  - {region: eu, pops: [{name: ams, nodes: 3}]}
network:
  intra_pop: {latency: 1ms, jitter: 200us}
replication: {flush_interval: 50ms, peer_timeout: 1s}
rules:
  - {name: uploads, kind: concurrency, key: ip, limit: 20, lease_ttl: 20s}
traffic:
  - {rule: uploads, keys: 1, rate: 30/s, hold: 1s}
events:
  - {at: 10s, crash: [ams-1]}
  - {at: 20s, restart: [ams-1]}
`

// A concurrency rule in the simulator: the central node never has more
// than the limit in flight, and when a node crashes holding its share of
// the slots, the others take them over at once (the membership sees it
// go): the fleet admits about what the central node does meanwhile,
// instead of losing the dead node's slots for lease_ttl.
func TestConcurrencyCrashedNodesSlotsComeBack(t *testing.T) {
	sc, err := Parse([]byte(concScenario))
	require.NoError(t, err)
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	assert.Zero(t, r.Central.OverLimitAdmits, "one node never holds more than the limit")
	assert.Zero(t, r.Central.WronglyRejected)
	require.Len(t, r.Phases, 3)
	crash, central := r.Phases[1], r.Central.Phases[1]
	require.Positive(t, central.Admitted)
	ratio := float64(crash.Admitted) / float64(central.Admitted)
	t.Logf("while a node is down the fleet admits %d, the central node %d (%.3f); over-limit admits %d of %d",
		crash.Admitted, central.Admitted, ratio, crash.OverLimitAdmits, crash.Admitted)
	assert.Greater(t, ratio, 0.95, "the dead node's slots came back")
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.5)
}

func TestConcurrencyHoldValidation(t *testing.T) {
	for _, tc := range []struct{ name, from, to, want string }{
		{"no hold", "hold: 1s}", "}", `traffic[0].hold: a stream of concurrency rule "uploads" needs a hold within the run, got 0s`},
		{"hold past the run", "hold: 1s}", "hold: 1m}", "needs a hold within the run, got 1m0s"},
		{"hold on a rate rule", "hold: 1s}", "hold: 1s}\n  - {rule: api, rate: 5/s, hold: 1s}", "traffic[1].hold: only a stream of a concurrency rule holds its requests"},
		{"two holds of one rule", "hold: 1s}", "hold: 1s}\n  - {rule: uploads, rate: 5/s, hold: 2s}", "traffic[1].hold: 2s differs from traffic[0]'s 1s"},
		{"global scope", "lease_ttl: 20s}", "lease_ttl: 20s, scope: global}", "rules[1].scope: global is not supported for kind: concurrency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(concScenario, "rules:\n", "rules:\n  - {name: api, limit: 10, window: 1s}\n", 1)
			src2 := strings.Replace(src, tc.from, tc.to, 1)
			require.NotEqual(t, src, src2)
			_, err := Parse([]byte(src2))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
