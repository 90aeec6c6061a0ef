package sim

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stopped PoP takes no request until it restarts, and its phases are
// fault phases like a crash's; a stop names known nodes, PoPs or regions.
// (The accuracy of stops: TestStoppedPoPIsDownNotCut.)
func TestStopStopsNodes(t *testing.T) {
	const yaml = `
name: stop
seed: 3
duration: 12s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}, {name: fra, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
replication: {flush_interval: 50ms, peer_timeout: 300ms}
rules:
  - {name: api, key: ip, limit: 200, window: 2s, scope: global, on_partition: share}
traffic:
  - {rule: api, keys: 2, rate: 200/s, share: {ams: 0.3, fra: 0.4, iad: 0.3}}
events:
  - {at: 4s, stop: [fra]}
  - {at: 6s, restart: [fra]}
  - {at: 8s, stop: [ams-2]}
`
	sc, err := Parse([]byte(yaml))
	require.NoError(t, err)
	var log bytes.Buffer
	res, err := Run(sc, Options{Log: &log})
	require.NoError(t, err)
	ds, err := ReadLog(&log)
	require.NoError(t, err)
	var during, after int
	for _, d := range ds {
		if d.Node != "fra-1" && d.Node != "fra-2" {
			continue
		}
		switch {
		case d.T >= 4*time.Second && d.T < 6*time.Second:
			during++
		case d.T >= 6500*time.Millisecond:
			after++
		}
	}
	assert.Zero(t, during, "no request reaches a stopped node")
	assert.NotZero(t, after, "a restarted node takes requests again")
	var names []string
	for _, p := range res.Report.Phases {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"healthy", "partitioned", "healed", "partitioned"}, names)

	_, err = Parse([]byte(yaml + "  - {at: 9s, stop: [nope]}\n"))
	assert.ErrorContains(t, err, `events[3].stop: unknown node, PoP or region "nope"`)
}
