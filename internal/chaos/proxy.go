package chaos

import (
	"bufio"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards the gateway connections of one region to one server of
// another region over loopback, adding the scenario's latency and jitter to
// every chunk of bytes in each direction (in order), and can be cut
// (every connection closed, new ones refused) and healed. It carries only
// connections whose CONNECT names its source gateway: nats-servers learn
// the URLs of other gateways, and a region cut off must not come back
// through another region's link. It is safe for concurrent use.
type proxy struct {
	l       net.Listener
	source  string // the gateway a connection must name
	latency time.Duration
	jitter  time.Duration

	wg     sync.WaitGroup
	mu     sync.Mutex
	target string
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
	rng    *rand.Rand

	refused atomic.Uint64
}

// maxChunk bounds one forwarded read; maxQueued bounds the chunks waiting
// out their delay in one direction of one connection (so a proxy holds at
// most maxChunk x maxQueued bytes per direction).
const (
	maxChunk  = 32 << 10
	maxQueued = 64
)

func newProxy(source, target string, latency, jitter time.Duration, seed uint64) (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{l: l, source: source, target: target, latency: latency, jitter: jitter,
		conns: map[net.Conn]struct{}{}, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// setCut cuts (true) or heals (false) the link.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
}

// close stops the proxy and waits for its goroutines; idempotent.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.l.Close()
	p.wg.Wait()
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// delay draws one chunk's added delay.
func (p *proxy) delay() time.Duration {
	d := p.latency
	if p.jitter > 0 {
		p.mu.Lock()
		d += time.Duration(p.rng.Int64N(int64(p.jitter)))
		p.mu.Unlock()
	}
	return d
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		target := p.target
		p.mu.Unlock()
		if refuse {
			p.refused.Add(1)
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			p.untrack(in, out)
			continue
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			p.pipe(in, out, out) // the server speaks first (INFO)
		}()
		go func() {
			defer p.wg.Done()
			br := bufio.NewReaderSize(in, maxChunk)
			_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := br.ReadString('\n')
			_ = in.SetReadDeadline(time.Time{})
			if err != nil || gatewayOf(line) != p.source {
				p.refused.Add(1)
				p.untrack(in, out)
				return
			}
			if _, err := io.WriteString(out, line); err != nil {
				p.untrack(in, out)
				return
			}
			p.pipe(out, in, br)
		}()
	}
}

type chunk struct {
	at time.Time
	b  []byte
}

// pipe copies from src (read through r) to dst, each chunk delayed, in
// order; it closes both connections when either side ends.
func (p *proxy) pipe(dst, src net.Conn, r io.Reader) {
	defer p.untrack(dst, src)
	if p.latency <= 0 && p.jitter <= 0 {
		_, _ = io.Copy(dst, r)
		return
	}
	q := make(chan chunk, maxQueued)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				for range q { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	last := time.Time{}
	buf := make([]byte, maxChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			at := time.Now().Add(p.delay())
			if at.Before(last) {
				at = last // jitter never reorders a byte stream
			}
			last = at
			q <- chunk{at: at, b: b}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// gatewayOf returns the gateway a CONNECT protocol line names, or "".
func gatewayOf(line string) string {
	arg, ok := strings.CutPrefix(line, "CONNECT ")
	if !ok {
		return ""
	}
	var ci struct {
		Gateway string `json:"gateway"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(arg)), &ci) != nil {
		return ""
	}
	return ci.Gateway
}
