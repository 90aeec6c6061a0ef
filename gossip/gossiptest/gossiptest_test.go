package gossiptest

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProxyCut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(line))
			}()
		}
	}()
	p := NewProxy(t)
	echo := func() error {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("hi\n")); err != nil {
			return err
		}
		_, err = bufio.NewReader(c).ReadString('\n')
		return err
	}
	require.Error(t, echo(), "no target yet")
	p.SetTarget(l.Addr().String())
	require.NoError(t, echo())
	p.SetCut(true)
	require.Error(t, echo(), "cut")
	p.SetCut(false)
	require.NoError(t, echo())
}

func TestSuperClusterCut(t *testing.T) {
	sc := StartSuperCluster(t, "eu", "us")
	sub, err := nats.Connect(sc.ClientURL(1))
	require.NoError(t, err)
	defer sub.Close()
	got := make(chan struct{}, 100)
	_, err = sub.Subscribe("x", func(*nats.Msg) { got <- struct{}{} })
	require.NoError(t, err)
	require.NoError(t, sub.Flush())
	pub, err := nats.Connect(sc.ClientURL(0))
	require.NoError(t, err)
	defer pub.Close()
	delivered := func() bool {
		_ = pub.Publish("x", nil)
		select {
		case <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}
	WaitFor(t, 10*time.Second, "eu -> us", delivered)
	sc.Cut(1, true)
	WaitFor(t, 10*time.Second, "gateway cut", func() bool { return sc.Servers[0].NumOutboundGateways() == 0 })
	require.False(t, delivered())
	sc.Cut(1, false)
	WaitFor(t, 20*time.Second, "eu -> us again", delivered)
}
