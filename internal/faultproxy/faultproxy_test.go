package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer speaks first (as a nats-server does: INFO), then echoes.
func echoServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { _ = l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.WriteString(c, "INFO {}\n")
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

func start(t *testing.T, cfg Config) *Proxy {
	p, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func dialGateway(t *testing.T, addr, gateway string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	_, err = io.WriteString(c, `CONNECT {"gateway":"`+gateway+`"}`+"\n")
	require.NoError(t, err)
	return c, r
}

func TestCarriesItsGatewayOnly(t *testing.T) {
	p := start(t, Config{Target: echoServer(t), Source: "eu", Latency: 2 * time.Millisecond, Jitter: time.Millisecond, Seed: 1})

	c, r := dialGateway(t, p.Addr(), "eu")
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "INFO {}\n", line)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, `CONNECT {"gateway":"eu"}`+"\n", line, "echoed, in order, through the delays")
	for i := range 50 {
		_, err = io.WriteString(c, "PING "+string(rune('a'+i%26))+"\n")
		require.NoError(t, err)
	}
	for i := range 50 {
		line, err = r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "PING "+string(rune('a'+i%26))+"\n", line)
	}

	assert.Equal(t, 1, p.Carried())

	_, r2 := dialGateway(t, p.Addr(), "us")
	_, _ = r2.ReadString('\n') // the INFO may come first
	_, err = r2.ReadString('\n')
	assert.Error(t, err, "another region's gateway is refused")
	assert.Equal(t, uint64(1), p.Refused())
}

func TestCutAndHeal(t *testing.T) {
	p := start(t, Config{Target: echoServer(t), Source: "eu"})
	_, r := dialGateway(t, p.Addr(), "eu")
	_, err := r.ReadString('\n')
	require.NoError(t, err)

	p.SetCut(true)
	_, err = io.ReadAll(r) // EOF or a reset, not the deadline
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "a cut closes the connection: %v", err)
	require.Eventually(t, func() bool { return p.Carried() == 0 }, 10*time.Second, time.Millisecond, "none carried")
	_, r = dialGateway(t, p.Addr(), "eu")
	_, err = r.ReadString('\n')
	assert.Error(t, err, "and refuses new ones")

	p.SetCut(false)
	_, r = dialGateway(t, p.Addr(), "eu")
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "INFO {}\n", line, "healed")
}

// A proxy knows which servers' gateways it carries, as their CONNECT
// names them, until each connection ends.
func TestServersCarried(t *testing.T) {
	p := start(t, Config{Target: echoServer(t), Source: "eu"})
	dial := func(id string) net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, `CONNECT {"gateway":"eu","name":"`+id+`"}`+"\n")
		require.NoError(t, err)
		return c
	}
	a := dial("NAAA")
	dial("NBBB")
	dial("NAAA")
	require.Eventually(t, func() bool { return slices.Equal(p.Servers(), []string{"NAAA", "NBBB"}) }, 10*time.Second, time.Millisecond)
	_ = a.Close()
	require.Eventually(t, func() bool { return p.Carried() == 2 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, []string{"NAAA", "NBBB"}, p.Servers(), "NAAA still has a connection")
	p.SetCut(true)
	require.Eventually(t, func() bool { return len(p.Servers()) == 0 }, 10*time.Second, time.Millisecond, "a cut drops them all")
}

// Without a source any connection is carried; without a target, none.
func TestLateTargetAnySource(t *testing.T) {
	p := start(t, Config{})
	echo := func() error {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		r := bufio.NewReader(c)
		if _, err := r.ReadString('\n'); err != nil { // INFO
			return err
		}
		if _, err := c.Write([]byte("hi\n")); err != nil {
			return err
		}
		_, err = r.ReadString('\n')
		return err
	}
	require.Error(t, echo(), "no target yet")
	p.SetTarget(echoServer(t))
	require.NoError(t, echo())
	p.SetCut(true)
	require.Error(t, echo(), "cut")
	p.SetCut(false)
	require.NoError(t, echo())
	assert.Equal(t, uint64(2), p.Refused())
}

func TestConfigErrors(t *testing.T) {
	_, err := New(Config{Latency: -time.Millisecond})
	assert.ErrorContains(t, err, "faultproxy: latency and jitter must not be negative, got -1ms and 0s")
}
