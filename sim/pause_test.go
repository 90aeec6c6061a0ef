package sim

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A paused node takes no request until resumed, then takes its share
// again with the incarnation it had; a pause is a fault phase.
func TestPauseStopsANode(t *testing.T) {
	sc, err := Load(filepath.Join("..", "scenarios", "live", "pause.yaml"))
	require.NoError(t, err)
	var log bytes.Buffer
	res, err := Run(sc, Options{Log: &log, RateScale: 0.2})
	require.NoError(t, err)
	ds, err := ReadLog(&log)
	require.NoError(t, err)
	var during, after int
	for _, d := range ds {
		if d.Node != "ams-2" {
			continue
		}
		switch {
		case d.T >= 10*time.Second && d.T < 15*time.Second:
			during++
		case d.T >= 15*time.Second && d.T < 22*time.Second:
			after++
		}
	}
	assert.Zero(t, during, "no request reaches a paused node")
	assert.NotZero(t, after, "a resumed node takes requests again")
	var names []string
	for _, p := range res.Report.Phases {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"healthy", "partitioned", "healed", "partitioned", "healed", "partitioned", "healed"}, names)
	assert.Zero(t, res.Report.Unserved)
}

func TestPauseValidation(t *testing.T) {
	base := "name: p\nduration: 10s\ntopology: [{region: eu, pops: [{name: ams, nodes: 2}]}]\nrules: [{name: api, limit: 10, window: 1s}]\ntraffic: [{rule: api, rate: 10/s}]\n"
	_, err := Parse([]byte(base + "events: [{at: 1s, pause: [nope]}]\n"))
	assert.ErrorContains(t, err, `events[0].pause: unknown node, PoP or region "nope"`)
	_, err = Parse([]byte(base + "events: [{at: 1s, resume: []}]\n"))
	assert.ErrorContains(t, err, "events[0].resume: must name at least one node")
	_, err = Parse([]byte(base + "events: [{at: 1s, pause: [ams-1], crash: [ams-2]}]\n"))
	assert.ErrorContains(t, err, "more than one action")
}

// With failure_detection, a crashed node stays in its PoP's members until
// the delay has passed, and a pause shorter than it goes unnoticed; the
// arrivals (and so the central node's figures) do not change.
func TestFailureDetectionDelaysMembership(t *testing.T) {
	sc, err := Load(filepath.Join("..", "scenarios", "live", "pause.yaml"))
	require.NoError(t, err)
	require.Equal(t, 6*time.Second, sc.Replication.FailureDetection)
	late, err := Run(sc, Options{RateScale: 0.5})
	require.NoError(t, err)
	sc.Replication.FailureDetection = 0
	now, err := Run(sc, Options{RateScale: 0.5})
	require.NoError(t, err)
	assert.Equal(t, now.Report.Central, late.Report.Central, "the same arrivals")
	assert.NotEqual(t, now.Report.Phases, late.Report.Phases, "membership told later changes the fleet's decisions")

	base := "name: p\nduration: 10s\ntopology: [{region: eu, pops: [{name: ams, nodes: 2}]}]\nrules: [{name: api, limit: 10, window: 1s}]\ntraffic: [{rule: api, rate: 10/s}]\n"
	_, err = Parse([]byte(base + "replication: {failure_detection: -1s}\n"))
	assert.ErrorContains(t, err, "replication.failure_detection: must be 0-1m, got -1s")
}

// A node crashed and started again before failure detection noticed: its
// PoP's members list both incarnations until the delay has passed, as
// memberlist does. Given incarnations name the members.
func TestRestartBeforeDetectionListsBothIncarnations(t *testing.T) {
	sc, err := Parse([]byte(`name: r
duration: 10s
topology: [{region: eu, pops: [{name: ams, nodes: 3}]}]
replication: {failure_detection: 3s}
rules: [{name: api, limit: 10, window: 1s}]
traffic: [{rule: api, rate: 10/s}]
events:
  - {at: 1s, crash: [ams-1]}
  - {at: 2s, restart: [ams-1]}
`))
	require.NoError(t, err)
	e, err := newEngine(sc, Options{Incarnations: map[string][]uint64{"ams-1": {100, 200}, "ams-2": {101}, "ams-3": {102}}})
	require.NoError(t, err)
	membersAt := func(at time.Duration) []string {
		e.end = int64(at)
		require.NoError(t, e.run())
		return e.nodes[1].core.Members()
	}
	assert.Equal(t, []string{"ams-1#100", "ams-2#101", "ams-3#102"}, membersAt(1500*time.Millisecond), "not noticed yet")
	assert.Equal(t, []string{"ams-1#100", "ams-1#200", "ams-2#101", "ams-3#102"}, membersAt(2500*time.Millisecond), "both until noticed")
	assert.Equal(t, []string{"ams-1#200", "ams-2#101", "ams-3#102"}, membersAt(4500*time.Millisecond), "the crashed one dropped")
	assert.Equal(t, uint64(200), e.nodes[0].inc)

	for _, c := range []struct {
		incs map[string][]uint64
		err  string
	}{
		{map[string][]uint64{"ams-9": {1}}, `sim: incarnations: no node "ams-9" in the topology`},
		{map[string][]uint64{"ams-1": {5}, "ams-2": {5}}, "sim: incarnations: 5 given to ams-1 and ams-2 (start 1)"},
	} {
		_, err := newEngine(sc, Options{Incarnations: c.incs})
		assert.ErrorContains(t, err, c.err)
	}
}

// A detection measured live replaces replication.failure_detection for
// that crash only.
func TestDetectionsGiven(t *testing.T) {
	sc, err := Parse([]byte(`name: r
duration: 10s
topology: [{region: eu, pops: [{name: ams, nodes: 3}]}]
replication: {failure_detection: 3s}
rules: [{name: api, limit: 10, window: 1s}]
traffic: [{rule: api, rate: 10/s}]
events:
  - {at: 1s, crash: [ams-1]}
  - {at: 2s, crash: [ams-2]}
`))
	require.NoError(t, err)
	e, err := newEngine(sc, Options{
		Incarnations: map[string][]uint64{"ams-1": {1}, "ams-2": {2}, "ams-3": {3}},
		Detections:   []Detection{{Node: "ams-1", At: time.Second, After: 1500 * time.Millisecond}, {Node: "ams-2", At: time.Second, After: time.Second}},
	})
	require.NoError(t, err)
	membersAt := func(at time.Duration) []string {
		e.end = int64(at)
		require.NoError(t, e.run())
		return e.nodes[2].core.Members()
	}
	assert.Equal(t, []string{"ams-1#1", "ams-2#2", "ams-3#3"}, membersAt(2400*time.Millisecond))
	assert.Equal(t, []string{"ams-2#2", "ams-3#3"}, membersAt(2600*time.Millisecond), "ams-1 after 1.5s")
	assert.Equal(t, []string{"ams-2#2", "ams-3#3"}, membersAt(4900*time.Millisecond), "ams-2's entry is for another time")
	assert.Equal(t, []string{"ams-3#3"}, membersAt(5100*time.Millisecond))

	_, err = newEngine(sc, Options{Detections: []Detection{{Node: "x", At: time.Second}}})
	assert.ErrorContains(t, err, `sim: detections[0]: want a node of the topology and a delay of at least 0, got "x" and 0s`)
}

// A node with a state file starts again after a crash with what it last
// wrote; without one it starts from nothing and admits its limit again.
func TestStateFileAcrossACrash(t *testing.T) {
	base := `name: s
duration: 10s
topology: [{region: eu, pops: [{name: ams, nodes: 1}]}]
rules: [{name: api, limit: 100, window: 10s, scope: node}]
traffic: [{rule: api, rate: 200/s, pattern: constant}]
events:
  - {at: 3s, crash: [ams-1]}
  - {at: 4s, restart: [ams-1]}
`
	after := func(extra string) int {
		sc, err := Parse([]byte(base + extra))
		require.NoError(t, err)
		var log bytes.Buffer
		_, err = Run(sc, Options{Log: &log})
		require.NoError(t, err)
		ds, err := ReadLog(&log)
		require.NoError(t, err)
		n := 0
		for _, d := range ds {
			if d.Admitted && d.T >= 4*time.Second {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 100, after(""), "no state file: the limit again")
	assert.Zero(t, after("state: {nodes: [ams], interval: 1s}\n"), "its last write holds the limit")

	_, err := Parse([]byte(base + "state: {nodes: [nope]}\n"))
	assert.ErrorContains(t, err, `state.nodes[0]: unknown node, PoP or region "nope"`)
	_, err = Parse([]byte(base + "state: {nodes: [ams], interval: -1s}\n"))
	assert.ErrorContains(t, err, "state.interval: must be at least 1ms, got -1s")
}

// A heal given a reconnection delay unblocks the links that much later,
// unless a partition came in between.
func TestReconnectsDelayAHeal(t *testing.T) {
	sc, err := Parse([]byte(`name: r
duration: 12s
topology:
  - {region: eu, pops: [{name: ams, nodes: 1}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
rules: [{name: api, limit: 10, window: 1s, scope: global}]
traffic: [{rule: api, rate: 10/s}]
events:
  - {at: 1s, partition: [[eu], [us]]}
  - {at: 2s, heal: true}
  - {at: 5s, partition: [[eu], [us]]}
  - {at: 6s, heal: true}
  - {at: 7s, partition: [[eu], [us]]}
`))
	require.NoError(t, err)
	e, err := newEngine(sc, Options{Reconnects: []Reconnect{
		{At: 2 * time.Second, From: "eu", To: "us", After: 1500 * time.Millisecond},
		{At: 6 * time.Second, From: "eu", To: "us", After: 3 * time.Second},
	}})
	require.NoError(t, err)
	blockedAt := func(at time.Duration) [2]bool {
		e.end = int64(at)
		require.NoError(t, e.run())
		return [2]bool{e.blocked[0][1], e.blocked[1][0]}
	}
	assert.Equal(t, [2]bool{true, false}, blockedAt(3400*time.Millisecond), "eu -> us not reconnected yet, us -> eu at once")
	assert.Equal(t, [2]bool{false, false}, blockedAt(3600*time.Millisecond), "reconnected")
	assert.Equal(t, [2]bool{true, true}, blockedAt(9500*time.Millisecond), "the heal at 6 s is overtaken by the partition at 7 s")
	assert.Equal(t, 2, e.nBlock)

	_, err = newEngine(sc, Options{Reconnects: []Reconnect{{At: time.Second, From: "eu", To: "ap"}}})
	assert.ErrorContains(t, err, `sim: reconnects[0]: want two regions of the topology and a delay of at least 0, got "eu", "ap" and 0s`)
}

// A node given a gateway loss to a region reaches none of it meanwhile;
// its PoP's other nodes still do.
func TestGatewayLossesDropOneNodesMessages(t *testing.T) {
	sc, err := Parse([]byte(`name: g
duration: 8s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
replication: {peer_timeout: 1s}
rules: [{name: api, limit: 10, window: 1s, scope: global}]
traffic: [{rule: api, rate: 10/s}]
`))
	require.NoError(t, err)
	// amsHeardAt tells whether iad heard ams within the second before at.
	amsHeardAt := func(losses []GatewayLoss, at time.Duration) bool {
		e, err := newEngine(sc, Options{GatewayLosses: losses})
		require.NoError(t, err)
		e.end = int64(at)
		require.NoError(t, e.run())
		iad := e.nodes[2]
		require.Equal(t, "iad-1", iad.name)
		now := e.nodeNow(iad, int64(at))
		for _, p := range iad.core.RemotePoPs(now) {
			if p.PoP == "ams" {
				return p.LastHeard > now-int64(time.Second)
			}
		}
		t.Fatal("iad never heard of ams")
		return false
	}
	both := []GatewayLoss{{At: 2 * time.Second, Node: "ams-1", To: "us", After: 4 * time.Second}, {At: 2 * time.Second, Node: "ams-2", To: "us", After: 4 * time.Second}}
	assert.True(t, amsHeardAt(nil, 5*time.Second))
	assert.False(t, amsHeardAt(both, 5*time.Second), "neither ams node reaches us: ams falls silent")
	assert.True(t, amsHeardAt(both[:1], 5*time.Second), "ams-2's messages still reach us")
	assert.True(t, amsHeardAt(both, 7500*time.Millisecond), "the gateways are back at 6 s")

	_, err = newEngine(sc, Options{GatewayLosses: []GatewayLoss{{Node: "ams-1", To: "eu"}}})
	assert.ErrorContains(t, err, `sim: gateway_losses[0]: want a node of the topology, another region and times of at least 0, got "ams-1", "eu", 0s and 0s`)
}

// A PoP whose every node is down lists nobody gone: a node that starts
// next knows none of its former members.
func TestWholePoPDownForgetsItsMembers(t *testing.T) {
	sc, err := Parse([]byte(`name: r
duration: 10s
topology: [{region: eu, pops: [{name: ams, nodes: 2}]}]
replication: {failure_detection: 6s}
rules: [{name: api, limit: 10, window: 1s}]
traffic: [{rule: api, rate: 10/s}]
events:
  - {at: 1s, crash: [ams]}
  - {at: 2s, restart: [ams]}
`))
	require.NoError(t, err)
	e, err := newEngine(sc, Options{Incarnations: map[string][]uint64{"ams-1": {1, 3}, "ams-2": {2, 4}}})
	require.NoError(t, err)
	e.end = int64(2500 * time.Millisecond)
	require.NoError(t, e.run())
	assert.Equal(t, []string{"ams-1#3", "ams-2#4"}, e.nodes[0].core.Members())
}
