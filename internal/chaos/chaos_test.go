package chaos

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/scenarios"
	"github.com/geolimit/geolimit/sim"
)

// Every shipped live scenario can run live.
func TestLiveScenariosPlan(t *testing.T) {
	var n int
	for _, name := range scenarios.Names() {
		if !strings.HasPrefix(name, "live/") {
			continue
		}
		n++
		b, _ := scenarios.Get(name)
		sc, err := sim.Parse(b)
		require.NoError(t, err, name)
		_, err = planOf(sc)
		assert.NoError(t, err, name)
		_, err = alignment(sc)
		assert.NoError(t, err, name)
		nodes := 0
		for _, rg := range sc.Topology {
			for _, p := range rg.PoPs {
				nodes += p.Nodes
			}
		}
		assert.True(t, nodes >= 5 && nodes <= 8, "%s: %d nodes", name, nodes)
		assert.True(t, sc.Duration >= 30*time.Second && sc.Duration <= 90*time.Second, "%s: %s", name, sc.Duration)
	}
	assert.GreaterOrEqual(t, n, 3)
}

func TestPlanRejectsWhatCannotRunLive(t *testing.T) {
	base := `
name: x
duration: 30s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}, {name: fra, nodes: 1}]}
  - {region: us, pops: [{name: iad, nodes: 2}]}
rules:
  - {name: api, limit: 100, window: 10s, scope: global}
traffic:
  - {rule: api, rate: 10/s}
`
	for _, c := range []struct{ extra, err string }{
		{"events:\n  - {at: 5s, partition: [[ams], [fra, iad]]}\n", `"ams": a live run cuts the gateways between regions only`},
		{"events:\n  - {at: 5s, clock_skew: {node: ams-1, offset: 1s}}\n", "clock_skew: not supported live"},
		{"events:\n  - {at: 5s, restart: [ams-1]}\n", "ams-1 was not crashed before"},
		{"network:\n  inter_region: {latency: 10ms, loss: 0.1}\n", "loss, duplicate and reorder are not supported live"},
		{"network:\n  links: [{from: [eu], to: [us], latency: 5ms}]\n", "per-pair overrides are not supported"},
	} {
		sc, err := sim.Parse([]byte(base + c.extra))
		require.NoError(t, err, c.extra)
		_, err = planOf(sc)
		assert.ErrorContains(t, err, c.err)
	}
	sc, err := sim.Parse([]byte(base + "events:\n  - {at: 5s, partition: [[eu], [iad]]}\n  - {at: 6s, crash: [eu]}\n  - {at: 6500ms, restart: [ams-1]}\n  - {at: 9s, heal: true}\n"))
	require.NoError(t, err)
	plan, err := planOf(sc)
	require.NoError(t, err)
	require.Len(t, plan, 4)
	assert.Equal(t, opPartition, plan[0].kind)
	assert.Equal(t, [][]int{{0}, {1}}, plan[0].groups)
	assert.Equal(t, []string{"ams-1", "ams-2", "fra-1"}, plan[1].nodes)
	assert.Equal(t, opRestart, plan[2].kind)
	assert.Equal(t, 6200*time.Millisecond, plan[2].launch, "launched ahead, but after its crash")
	led := withLead(plan, 100*time.Millisecond)
	assert.Equal(t, 6400*time.Millisecond, led[2].launch, "as far ahead as a start takes")
	assert.Equal(t, 6200*time.Millisecond, withLead(plan, time.Second)[2].launch, "never before its crash")

	// A clean stop is a SIGTERM; the node restarts as after a crash.
	sc, err = sim.Parse([]byte(base + "events:\n  - {at: 6s, stop: [fra]}\n  - {at: 7s, restart: [fra]}\n"))
	require.NoError(t, err)
	plan, err = planOf(sc)
	require.NoError(t, err)
	require.Len(t, plan, 2)
	assert.Equal(t, opStop, plan[0].kind)
	assert.Equal(t, []string{"fra-1"}, plan[0].nodes)
	assert.Equal(t, opRestart, plan[1].kind)
}

// A node of a scenario's state section gets a state file in its config;
// the others none.
func TestStateFileConfig(t *testing.T) {
	sc, err := sim.Parse([]byte(`
name: x
duration: 30s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
state: {nodes: [ams-2, us], interval: 2s}
rules:
  - {name: api, limit: 100, window: 10s, scope: global}
traffic:
  - {rule: api, rate: 10/s}
`))
	require.NoError(t, err)
	dir := t.TempDir()
	f, err := newFleet(sc, dir, "edge", 1, t.Logf)
	require.NoError(t, err)
	defer f.stopAll()
	for name, want := range map[string]bool{"ams-1": false, "ams-2": true, "iad-1": true} {
		b, err := os.ReadFile(f.byName[name].config)
		require.NoError(t, err)
		if want {
			assert.Contains(t, string(b), "state:\n    file: "+dir+"/"+name+".state\n    interval: 2s\n", name)
		} else {
			assert.NotContains(t, string(b), "state:", name)
		}
	}
}

// TestLiveSmoke runs a shortened live/cut-share on a live fleet: six edge
// processes, a cut and a heal. It takes about half a minute and runs when
// GEOLIMIT_CHAOS_SMOKE=1 (CI sets it, beside the race-enabled suite).
func TestLiveSmoke(t *testing.T) {
	if os.Getenv("GEOLIMIT_CHAOS_SMOKE") != "1" {
		t.Skip("set GEOLIMIT_CHAOS_SMOKE=1 to run a live fleet")
	}
	b, _ := scenarios.Get("live/cut-share")
	sc, err := sim.Parse(b)
	require.NoError(t, err)
	sc.Duration = 24 * time.Second
	sc.Events[0].At, sc.Events[1].At = 8*time.Second, 16*time.Second
	for i := range sc.Traffic {
		sc.Traffic[i].End = sc.Duration
	}
	require.NoError(t, sc.Validate())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, sc, Options{Logf: t.Logf})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	t.Log("\n" + out.String())
	assert.Empty(t, rep.UnexpectedExits)
	assert.Zero(t, rep.LostAdmits)
	assert.Equal(t, rep.Sim.Requests, rep.Live.Requests, "every arrival decided")
	assert.Len(t, rep.Faults, 2)
	assert.InDelta(t, rep.Sim.AdmittedOverCentral, rep.Live.AdmittedOverCentral, Goal)
	assert.InDelta(t, rep.Sim.MaxAdmittedRatio, rep.Live.MaxAdmittedRatio, Goal)
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	for _, f := range []string{`"live"`, `"sim"`, `"admitted"`, `"central_admitted"`, `"max_admitted_ratio"`, `"phases"`, `"faults"`, `"unexpected_exits"`, `"lost_admits"`} {
		assert.Contains(t, js.String(), f)
	}
	var svg bytes.Buffer
	require.NoError(t, rep.WriteSVG(&svg))
	assert.Contains(t, svg.String(), "<polyline")
}

// The fleet's ports are distinct, free, and drawn below the ephemeral
// range where the kernel says where it is, so that the fleet's own
// outgoing connections cannot take one before its node binds it.
func TestFreePortsBelowEphemeral(t *testing.T) {
	ports, err := freePorts(40)
	require.NoError(t, err)
	require.Len(t, ports, 40)
	seen := map[int]bool{}
	lo, hi := belowEphemeral()
	for _, p := range ports {
		assert.False(t, seen[p], "port %d twice", p)
		seen[p] = true
		if hi > 0 {
			assert.True(t, p >= lo && p < hi, "port %d outside [%d, %d)", p, lo, hi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err, "port %d free", p)
		_ = l.Close()
	}
}
