package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// skewedClock is the real clock plus a fixed offset.
type skewedClock int64

func (s skewedClock) Now() int64 { return time.Now().UnixNano() + int64(s) }

// Two regions of a real super-cluster whose clocks are 4s apart: each
// Replicator keeps its FleetClock at its clock plus the correction its Core
// agreed, and the two fleet clocks meet (within the jitter of loopback,
// well under a millisecond, taken at 50ms here).
func TestLiveFleetClock(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rules := []pop.Rule{{Name: "api", Limit: 100, Window: time.Second, Cost: 1, Scope: pop.ScopeGlobal}}
	ids := []identity.PoPID{{Region: "eu", PoP: "eu1"}, {Region: "us", PoP: "us1"}}
	skews := []skewedClock{0, skewedClock(4 * time.Second)}
	var fleets []*clock.Offset
	var reps []*Replicator
	for i, id := range ids {
		fleet := clock.NewOffset(skews[i])
		fleets = append(fleets, fleet)
		o := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: 200 * time.Millisecond},
			Clock: skews[i], FleetClock: fleet}
		o.Global = NATSConnect(NATSConfig{Self: id, Name: id.PoP + "-1", URL: c.Servers[i].ClientURL(), ReconnectWait: 50 * time.Millisecond, PingInterval: time.Second})
		o.ExpectedPoPs = popNames(ids...)
		reps = append(reps, startMember(t, ctx, newNode(t, id.Region, id.PoP, id.PoP+"-1", rules), o).rep)
	}
	require.Eventually(t, func() bool {
		d := fleets[1].Now() - fleets[0].Now()
		return fleets[1].Get() != 0 && d > -int64(50*time.Millisecond) && d < int64(50*time.Millisecond)
	}, 20*time.Second, poll, "the fleet clocks meet")
	t.Logf("corrections: eu %s, us %s", fleets[0].Get(), fleets[1].Get())
	require.Equal(t, fleets[1].Get(), reps[1].Status().ClockCorrection, "the status page shows it")
}
