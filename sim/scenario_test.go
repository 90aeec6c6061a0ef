package sim

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/repl"
)

const minimal = `
name: t
duration: 10s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
rules:
  - {name: api, limit: 10, window: 1s}
traffic:
  - {rule: api, rate: 5/s}
`

func TestParseMinimalDefaults(t *testing.T) {
	sc, err := Parse([]byte(minimal))
	require.NoError(t, err)
	assert.Equal(t, repl.DefaultSettings(), sc.Replication.Settings)
	assert.Equal(t, "global", sc.Rules[0].Scope)
	assert.Equal(t, "keep", sc.Rules[0].OnPartition)
	assert.Equal(t, uint64(1), sc.Rules[0].Cost)
	assert.Equal(t, "poisson", sc.Traffic[0].Pattern)
	assert.Equal(t, Rate(5), sc.Traffic[0].Rate)
	assert.Equal(t, sc.Duration, sc.Traffic[0].End)
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
		err  bool
	}{
		{"400/s", 400, false},
		{"24000/m", 400, false},
		{"2/ms", 2000, false},
		{"3600/h", 1, false},
		{"12.5", 12.5, false},
		{"-3/s", -3, false}, // parsed; Validate rejects it naming the field
		{"5/d", 0, true},
		{"fast", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRate(tc.in)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, float64(tc.want), float64(got), 1e-9)
		})
	}
}

func TestValidationErrors(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown top-level field", "duration: 10s", "duration: 10s\nspeed: 3", `line 4: unknown field "speed" in Scenario`},
		{"unknown rule field", "{name: api, limit: 10, window: 1s}", "{name: api, limit: 10, window: 1s, refill: 3}", `unknown field "refill" in Rule`},
		{"negative rate", "rate: 5/s", "rate: -5/s", "traffic[0].rate: must not be negative"},
		{"bad rate unit", "rate: 5/s", "rate: 5/d", "bad rate \"5/d\""},
		{"partition unknown region", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s, partition: [[eu], [asia]]}", "events[0].partition: [1]: unknown region or PoP \"asia\""},
		{"cut unknown PoP", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s, cut: {from: [lhr], to: [eu]}}", "events[0].cut.from: unknown region or PoP \"lhr\""},
		{"event after the run", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 11s, heal: true}", "events[0].at: must be within the run"},
		{"event without action", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s}", "events[0].at: event has no action"},
		{"two actions", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s, heal: true, crash: [ams]}", "more than one action"},
		{"skew unknown node", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s, clock_skew: {node: ams-9, offset: 1s}}", "events[0].clock_skew.node: unknown node \"ams-9\""},
		{"crash unknown", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s, crash: [lhr-1]}", "events[0].crash: unknown node, PoP or region \"lhr-1\""},
		{"flap without period", "rate: 5/s}", "rate: 5/s}\nevents:\n  - {at: 1s, flap: {partition: [[eu]], heal_for: 1s, until: 5s}}", "events[0].flap.cut_for: must be positive"},
		{"traffic unknown rule", "{rule: api, rate: 5/s}", "{rule: web, rate: 5/s}", "traffic[0].rule: unknown rule \"web\""},
		{"share unknown PoP", "rate: 5/s}", "rate: 5/s, share: {lhr: 1}}", "traffic[0].share: unknown PoP \"lhr\""},
		{"negative share", "rate: 5/s}", "rate: 5/s, share: {ams: -1, iad: 2}}", "traffic[0].share: ams: must not be negative"},
		{"bad spread", "rate: 5/s}", "rate: 5/s, spread: normal}", "traffic[0].spread: unknown spread \"normal\""},
		{"bad pattern", "rate: 5/s}", "rate: 5/s, pattern: sine}", "traffic[0].pattern: unknown pattern \"sine\""},
		{"onoff without on", "rate: 5/s}", "rate: 5/s, pattern: onoff}", "traffic[0].on: onoff needs on > 0"},
		{"cost over limit", "rate: 5/s}", "rate: 5/s, cost: 11}", "traffic[0].cost: 11 exceeds the limit 10"},
		{"zero limit", "limit: 10,", "limit: 0,", "rules[0].limit: must be at least 1"},
		{"bad scope", "window: 1s}", "window: 1s, scope: planet}", "rules[0].scope: unknown scope \"planet\""},
		{"bad policy", "window: 1s}", "window: 1s, on_partition: panic}", "rules[0].on_partition: unknown partition policy \"panic\""},
		{"duplicate PoP", "{region: us, pops: [{name: iad, nodes: 1}]}", "{region: us, pops: [{name: ams, nodes: 1}]}", "topology[1].pops[0].name: \"ams\" already names a PoP"},
		{"no nodes", "{name: iad, nodes: 1}", "{name: iad, nodes: 0}", "topology[1].pops[0].nodes: must be 1-1000"},
		{"negative duration", "duration: 10s", "duration: -10s", "duration: must be positive"},
		{"loss over 1", "rules:", "network: {inter_region: {loss: 1.5}}\nrules:", "network.inter_region.loss: must be a probability"},
		{"negative latency", "rules:", "network: {intra_pop: {latency: -1ms}}\nrules:", "network.intra_pop.latency: must not be negative"},
		{"link to unknown", "rules:", "network: {links: [{from: [eu], to: [mars]}]}\nrules:", "network.links[0].to: unknown region or PoP \"mars\""},
		{"negative flush", "rules:", "replication: {flush_interval: -1ms}\nrules:", "replication.flush_interval: must not be negative"},
		{"change without content", "rate: 5/s}", "rate: 5/s, changes: [{at: 2s}]}", "traffic[0].changes[0]: must change rate or share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(minimal, tc.from, tc.to, 1)
			require.NotEqual(t, minimal, src, "the case must change the scenario")
			_, err := Parse([]byte(src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "sim: "), err.Error())
		})
	}
}

func TestBuiltinScenariosLoad(t *testing.T) {
	for _, path := range builtins(t) {
		sc, err := Load(path)
		require.NoError(t, err, path)
		assert.NotEmpty(t, sc.Description, path)
	}
}

func TestQueueOrder(t *testing.T) {
	var q queue
	times := []int64{5, 3, 9, 3, 1, 5, 7, 3, 0, 9}
	for i, at := range times {
		q.push(event{at: at, i: i})
	}
	var got [][2]int64
	for q.peek() != never {
		ev := q.pop()
		got = append(got, [2]int64{ev.at, int64(ev.i)})
	}
	want := [][2]int64{{0, 8}, {1, 4}, {3, 1}, {3, 3}, {3, 7}, {5, 0}, {5, 5}, {7, 6}, {9, 2}, {9, 9}}
	assert.Equal(t, want, got, "time order, then scheduling order")
}

// TestQueueOrderInterleaved pushes and pops thousands of events in a seeded
// random mix, many at equal times, deep enough for several heap levels: each
// pop returns the earliest event left, ties in scheduling order.
func TestQueueOrderInterleaved(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var q queue
	type key struct{ at, seq int64 }
	var left []key // the model: events not popped yet
	now := int64(0)
	for step := range 20000 {
		if rng.IntN(3) > 0 || len(left) == 0 {
			at := now + rng.Int64N(50)
			q.push(event{at: at, i: step})
			left = append(left, key{at, int64(q.seq)})
			continue
		}
		ev := q.pop()
		best := 0
		for k, e := range left {
			if e.at < left[best].at || e.at == left[best].at && e.seq < left[best].seq {
				best = k
			}
		}
		require.Equal(t, left[best], key{ev.at, int64(ev.seq)}, "step %d", step)
		left = append(left[:best], left[best+1:]...)
		now = ev.at
	}
	require.Len(t, q.h, len(left))
}

// A restarted node with a state file starts with what its former
// incarnation last wrote; without, it starts empty.
func TestStateFileRestoresCounts(t *testing.T) {
	src := `name: state
seed: 1
duration: 12s
topology:
  - {region: eu, pops: [{name: ams, nodes: 1}]}
replication: {flush_interval: 50ms, peer_timeout: 300ms}
state: {nodes: [ams-1], interval: 1s}
rules:
  - {name: api, key: ip, limit: 100, window: 1m, scope: global}
traffic:
  - {rule: api, keys: 1, rate: 50/s}
events:
  - {at: 5s, crash: [ams-1]}
  - {at: 6s, restart: [ams-1]}
`
	admitted := func(sc *Scenario) uint64 {
		res, err := Run(sc, Options{})
		require.NoError(t, err)
		return res.Report.Admitted
	}
	withState := admitted(mustParse(t, src))
	without := mustParse(t, src)
	without.State.Nodes = nil
	// One node alone: without a file it counts the window again from 0.
	assert.Equal(t, uint64(100), withState)
	assert.Greater(t, admitted(without), uint64(150))

	bad := mustParse(t, src)
	bad.State.Interval = time.Microsecond
	require.ErrorContains(t, bad.Validate(), "state.interval")
}
