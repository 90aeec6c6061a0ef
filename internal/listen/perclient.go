package listen

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// PerClient wraps l so that one client address holds at most max open
// connections: a connection beyond that is closed as soon as it is
// accepted, so that one address that opens connections and stalls them
// (a slow-body flood) cannot fill l's slots and keep other clients
// waiting. Connections whose peer is not an IP address are not counted.
// Refused counts what was closed.
func PerClient(l net.Listener, max int) *PerClientListener {
	return &PerClientListener{Listener: l, max: max, open: map[netip.Addr]int{}}
}

// PerClientListener is the listener PerClient returns. Safe for
// concurrent use.
type PerClientListener struct {
	net.Listener
	max int

	mu   sync.Mutex
	open map[netip.Addr]int // open connections by client; no zero entries

	refused atomic.Uint64
}

// Refused returns how many connections were closed for their client's cap.
func (l *PerClientListener) Refused() uint64 { return l.refused.Load() }

// Accept returns the next connection whose client is under its cap.
func (l *PerClientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, perr := netip.ParseAddrPort(c.RemoteAddr().String())
		if perr != nil {
			return c, nil
		}
		ip := ap.Addr().Unmap()
		l.mu.Lock()
		if l.open[ip] >= l.max {
			l.mu.Unlock()
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		l.open[ip]++
		l.mu.Unlock()
		return &clientConn{Conn: c, l: l, ip: ip}, nil
	}
}

// release gives back ip's slot.
func (l *PerClientListener) release(ip netip.Addr) {
	l.mu.Lock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
	l.mu.Unlock()
}

type clientConn struct {
	net.Conn
	l      *PerClientListener
	ip     netip.Addr
	closed atomic.Bool
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.ip)
	}
	return err
}

var _ net.Listener = (*PerClientListener)(nil)
