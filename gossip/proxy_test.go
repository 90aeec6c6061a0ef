package gossip

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpProxy forwards connections to a target that can be set late, and can
// be cut (every connection closed, new ones refused) and restored.
type tcpProxy struct {
	l  net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string
	cut    bool
	conns  map[net.Conn]struct{}
	closed bool
}

func newProxy(t testing.TB) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{l: l, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.l.Addr().String() }

func (p *tcpProxy) setTarget(hostport string) {
	p.mu.Lock()
	p.target = hostport
	p.mu.Unlock()
}

// setCut cuts (true) or restores (false) the link.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.l.Close()
	p.wg.Wait()
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target, refuse := p.target, p.cut || p.closed || p.target == ""
		p.mu.Unlock()
		if refuse {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in) || !p.track(out) {
			p.untrack(in)
			p.untrack(out)
			continue
		}
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			p.untrack(dst)
			p.untrack(src)
		}
		go pipe(in, out)
		go pipe(out, in)
	}
}
