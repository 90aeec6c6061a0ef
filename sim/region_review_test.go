package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memberRestartScenario: region eu of aaa (one node, first by name: its
// epoch is eu's region epoch) and ams (two nodes), us of iad. aaa goes
// for good; ams speaks for eu under aaa's region epoch. Then ams-2
// restarts: no other PoP of eu is left to tell it eu's region epoch.
const memberRestartScenario = `
name: member-restart-alone-in-region
seed: 7
duration: 60s
topology:
  - {region: eu, pops: [{name: aaa, nodes: 1}, {name: ams, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
network:
  intra_pop: {latency: 1ms, jitter: 200us}
  inter_pop: {latency: 10ms, jitter: 2ms}
  inter_region: {latency: 80ms, jitter: 10ms}
replication: {flush_interval: 50ms, peer_timeout: 300ms, anti_entropy_interval: 5s, region_voices: %t}
rules:
  - {name: api, key: ip, limit: 1000, window: 10s, cost: 1, scope: global, mode: enforce, on_partition: keep}
traffic:
  - {rule: api, keys: 1, rate: 400/s, pattern: poisson, share: {ams: 0.5, iad: 0.5}}
events:
  - {at: 5s, crash: [aaa]}
  - {at: 20s, crash: [ams-2]}
  - {at: 21s, restart: [ams-2]}
`

// A member of the region's last PoP that restarts speaks for the region
// under the same region epoch as its members: the other regions count the
// region once, and admit about what they admit without region voices.
func TestRegionVoicesMemberRestartAloneInRegion(t *testing.T) {
	run := func(voices bool) Report {
		res, err := Run(mustParse(t, fmt.Sprintf(memberRestartScenario, voices)), Options{})
		require.NoError(t, err)
		return res.Report
	}
	off, on := run(false), run(true)
	t.Logf("every PoP: max a/l %.3f, admitted %d (central %d)", off.MaxAdmittedRatio, off.Admitted, off.Central.Admitted)
	t.Logf("region voices: max a/l %.3f, admitted %d (central %d)", on.MaxAdmittedRatio, on.Admitted, on.Central.Admitted)
	assert.LessOrEqual(t, on.MaxAdmittedRatio, off.MaxAdmittedRatio+0.03, "over-limit peak")
	assert.GreaterOrEqual(t, float64(on.Admitted), 0.97*float64(off.Admitted), "admitted")
}
