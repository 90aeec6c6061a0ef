package natsembed

import (
	"bytes"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartRandomPort(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:-1", "127.0.0.1:0", ""} {
		t.Run(listen, func(t *testing.T) {
			s, err := Start(Options{Listen: listen})
			require.NoError(t, err)
			defer s.Shutdown()
			// Not the default port (a random one may start with 4222:
			// 42227 failed a check of the URL's text).
			u, err := url.Parse(s.ClientURL())
			require.NoError(t, err)
			assert.NotEqual(t, "4222", u.Port(), s.ClientURL())
			c, err := net.Dial("tcp", s.Addr().String())
			require.NoError(t, err)
			_ = c.Close()
			assert.Nil(t, s.GatewayAddr())
			assert.Empty(t, s.GatewayURL())
			s.Shutdown()
			s.Shutdown() // idempotent
		})
	}
}

func TestGatewaySuperCluster(t *testing.T) {
	eu, err := Start(Options{ServerName: "eu-1", Gateway: &Gateway{Name: "eu", Listen: "127.0.0.1:-1"}})
	require.NoError(t, err)
	defer eu.Shutdown()
	require.NotNil(t, eu.GatewayAddr())
	assert.NotZero(t, eu.GatewayAddr().Port)
	us, err := Start(Options{ServerName: "us-1", Gateway: &Gateway{Name: "us", Listen: "127.0.0.1:0",
		Gateways: []RemoteGateway{{Name: "eu", URLs: []string{eu.GatewayURL()}}}}})
	require.NoError(t, err)
	defer us.Shutdown()
	assert.Eventually(t, func() bool {
		return eu.NumOutboundGateways() == 1 && us.NumOutboundGateways() == 1
	}, 10*time.Second, 10*time.Millisecond, "gateways never connected both ways")
}

func TestBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"bad listen":       {Listen: "nonsense"},
		"bad port":         {Listen: "127.0.0.1:99999"},
		"gateway no name":  {Gateway: &Gateway{Listen: "127.0.0.1:-1"}},
		"gateway bad url":  {Gateway: &Gateway{Name: "a", Listen: "127.0.0.1:-1", Gateways: []RemoteGateway{{Name: "b", URLs: []string{"::"}}}}},
		"gateway bad addr": {Gateway: &Gateway{Name: "a", Listen: "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Start(o)
			if s != nil {
				s.Shutdown()
			}
			assert.Error(t, err)
		})
	}
}

// A warning that repeats every second (a gateway that cannot connect) is
// logged at once, then with a doubling gap, with the count left out; after
// ten quiet minutes it is logged at once again. Other formats are not held
// back.
func TestRepeatedLogsBackOff(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	a := &slogAdapter{l: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }}
	logged := func() int { return strings.Count(buf.String(), "cannot connect") }
	for range 60 { // one a second for a minute
		a.Warnf("gateway %q: cannot connect: %v", "us", "refused")
		now = now.Add(time.Second)
	}
	// At 0s, then after gaps of 1, 2, 4, 8, 16s: 0, 1, 3, 7, 15, 31 (then 63).
	if got := logged(); got != 6 {
		t.Fatalf("%d lines for 60 repeats in a minute, want 6:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "repeated=15") {
		t.Errorf("the count left out is not logged:\n%s", buf.String())
	}
	a.Errorf("another %s", "error")
	if !strings.Contains(buf.String(), "another error") {
		t.Error("another format was held back")
	}
	now = now.Add(11 * time.Minute)
	a.Warnf("gateway %q: cannot connect: %v", "us", "refused")
	if got := logged(); got != 7 {
		t.Fatalf("%d lines after a quiet spell, want 7", got)
	}
}
