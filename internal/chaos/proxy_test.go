package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer speaks first (as a nats-server does: INFO), then echoes.
func echoServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
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

func TestProxyCarriesItsGatewayOnly(t *testing.T) {
	p, err := newProxy("eu", echoServer(t), 2*time.Millisecond, time.Millisecond, 1)
	require.NoError(t, err)
	defer p.close()

	c, r := dialGateway(t, p.addr(), "eu")
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

	_, r2 := dialGateway(t, p.addr(), "us")
	_, _ = r2.ReadString('\n') // the INFO may come first
	_, err = r2.ReadString('\n')
	assert.Error(t, err, "another region's gateway is refused")
	assert.Equal(t, uint64(1), p.refused.Load())
}

func TestProxyCutAndHeal(t *testing.T) {
	p, err := newProxy("eu", echoServer(t), 0, 0, 1)
	require.NoError(t, err)
	defer p.close()
	_, r := dialGateway(t, p.addr(), "eu")
	_, err = r.ReadString('\n')
	require.NoError(t, err)

	p.setCut(true)
	_, err = io.ReadAll(r) // EOF or a reset, not the deadline
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "a cut closes the connection: %v", err)
	_, r = dialGateway(t, p.addr(), "eu")
	_, err = r.ReadString('\n')
	assert.Error(t, err, "and refuses new ones")

	p.setCut(false)
	_, r = dialGateway(t, p.addr(), "eu")
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "INFO {}\n", line, "healed")
}
