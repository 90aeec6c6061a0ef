package gossiptest

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSuperClusterCut(t *testing.T) {
	sc := StartSuperCluster(t, "eu", "us")
	sub, err := nats.Connect(sc.ClientURL(1))
	require.NoError(t, err)
	defer sub.Close()
	got := make(chan string, 100)
	_, err = sub.Subscribe("x", func(m *nats.Msg) { got <- string(m.Data) })
	require.NoError(t, err)
	require.NoError(t, sub.Flush())
	pub, err := nats.Connect(sc.ClientURL(0))
	require.NoError(t, err)
	defer pub.Close()
	// Each probe waits for its own message: one that arrives after its
	// probe gave up (a busy machine) must not pass for a later probe's,
	// least of all for one published into the cut.
	probe := 0
	delivered := func() bool {
		probe++
		want := strconv.Itoa(probe)
		_ = pub.Publish("x", []byte(want))
		timeout := time.After(20 * time.Millisecond)
		for {
			select {
			case m := <-got:
				if m == want {
					return true
				}
			case <-timeout:
				return false
			}
		}
	}
	require.Eventually(t, delivered, 10*time.Second, poll, "eu -> us")
	sc.Cut(1, true)
	require.Eventually(t, func() bool { return sc.Servers[0].NumOutboundGateways() == 0 }, 10*time.Second, poll, "gateway cut")
	require.False(t, delivered())
	sc.Cut(1, false)
	require.Eventually(t, delivered, 20*time.Second, poll, "eu -> us again")
}

// linked reports whether s holds an outbound gateway connection to the
// region name.
func linked(t *testing.T, s *server.Server, name string) bool {
	t.Helper()
	gz, err := s.Gatewayz(&server.GatewayzOptions{})
	require.NoError(t, err)
	o := gz.OutboundGateways[name]
	return o != nil && o.Connection != nil
}

// inbound returns how many gateway connections from the region name s has
// accepted (a connection counts once its CONNECT has reached s).
func inbound(t *testing.T, s *server.Server, name string) int {
	t.Helper()
	gz, err := s.Gatewayz(&server.GatewayzOptions{})
	require.NoError(t, err)
	return len(gz.InboundGateways[name])
}

// numGateways returns how many gateway connections s holds, out and in.
func numGateways(t *testing.T, s *server.Server) int {
	t.Helper()
	gz, err := s.Gatewayz(&server.GatewayzOptions{})
	require.NoError(t, err)
	n := 0
	for _, o := range gz.OutboundGateways {
		if o.Connection != nil {
			n++
		}
	}
	for _, in := range gz.InboundGateways {
		n += len(in)
	}
	return n
}

// A cut region stays cut: its server learns the URLs the other regions
// reach each other by and tries them, and every link refuses it.
func TestSuperClusterCutIsolatesTheRegion(t *testing.T) {
	c := StartSuperCluster(t, "eu", "us", "ap")
	c.Cut(2, true)
	// Each server sees the cut when its own connections close: wait until
	// ap has none left and eu and us hold no connection to ap, then watch
	// that it stays so while eu and us stay linked.
	cutOff := func() bool {
		return numGateways(t, c.Servers[2]) == 0 && !linked(t, c.Servers[0], "ap") && !linked(t, c.Servers[1], "ap")
	}
	require.Eventually(t, cutOff, 10*time.Second, poll, "ap without gateways")
	// The servers retry a lost gateway after a second or so, each time
	// through the URLs they know for it: watch until every cut link has
	// refused two more of their attempts, and fail at the first link seen.
	// A link is judged where it would end, at eu and us: ap itself holds
	// an outbound connection for the moment of each refused handshake.
	cut := []*Proxy{c.Links[2][0], c.Links[2][1], c.Links[0][2], c.Links[1][2]}
	base := make([]uint64, len(cut))
	for i, p := range cut {
		base[i] = p.Refused()
	}
	var broken string
	require.Eventually(t, func() bool {
		switch {
		case inbound(t, c.Servers[0], "ap") != 0 || inbound(t, c.Servers[1], "ap") != 0:
			broken = "ap reached a region through another region's link"
		case linked(t, c.Servers[0], "ap"):
			broken = "eu -> ap"
		case linked(t, c.Servers[1], "ap"):
			broken = "us -> ap"
		case !linked(t, c.Servers[0], "us"):
			broken = "eu -> us lost"
		case !linked(t, c.Servers[1], "eu"):
			broken = "us -> eu lost"
		}
		if broken != "" {
			return true
		}
		for i, p := range cut {
			if p.Refused() < base[i]+2 {
				return false
			}
		}
		return true
	}, 30*time.Second, poll, "every cut link refused two retries")
	require.Empty(t, broken)
	c.Cut(2, false)
	require.Eventually(t, func() bool {
		for _, s := range c.Servers {
			if s.NumOutboundGateways() != 2 {
				return false
			}
		}
		return true
	}, 30*time.Second, poll, "gateways back")
}
