// Package faultproxy is a TCP proxy that injects faults into the links of
// a test fleet on loopback: it adds latency and jitter to every chunk of
// bytes (in order), and can be cut (every connection closed, new ones
// refused) and healed. For nats-server gateways, it can carry only the
// connections whose CONNECT names one gateway: a server learns the URLs
// other servers reach a gateway by, and a region cut off must not come back
// through another region's link.
//
//	p, err := faultproxy.New(faultproxy.Config{Target: "127.0.0.1:7222", Source: "eu", Latency: 30 * time.Millisecond})
//	// point region eu's gateway to region us at nats://p.Addr()
//	p.SetCut(true)  // eu loses its link to that server
//	p.SetCut(false) // and gets it back
//	p.Close()
//
// It listens on a free port of 127.0.0.1.
package faultproxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Proxy.
type Config struct {
	// Target is the host:port connections are forwarded to; empty refuses
	// them until SetTarget.
	Target string
	// Source, when set, is the gateway a connection's first line (the
	// nats-server CONNECT) must name; others are refused. Empty carries
	// any connection.
	Source string
	// Latency is added to every chunk of bytes in each direction.
	Latency time.Duration
	// Jitter, when positive, adds a delay drawn uniformly from [0, Jitter)
	// to every chunk; chunks are never reordered.
	Jitter time.Duration
	// Seed seeds the jitter's draws.
	Seed uint64
}

// Proxy forwards TCP connections to a target. It is safe for concurrent
// use.
type Proxy struct {
	l       net.Listener
	latency time.Duration
	jitter  time.Duration

	wg     sync.WaitGroup
	mu     sync.Mutex
	target string
	source string
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
	rng    *rand.Rand
	// servers counts the connections carried now by the server ID their
	// CONNECT named (with a Source set).
	servers map[string]int

	refused atomic.Uint64
	carried atomic.Int64 // connections past the source check, open
}

// maxChunk bounds one forwarded read; maxQueued bounds the chunks waiting
// out their delay in one direction of one connection (so a proxy holds at
// most maxChunk x maxQueued bytes per direction of a connection).
const (
	maxChunk  = 32 << 10
	maxQueued = 64
)

// New starts a proxy on a free port of 127.0.0.1.
func New(cfg Config) (*Proxy, error) {
	if cfg.Latency < 0 || cfg.Jitter < 0 {
		return nil, fmt.Errorf("faultproxy: latency and jitter must not be negative, got %s and %s", cfg.Latency, cfg.Jitter)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{l: l, target: cfg.Target, source: cfg.Source, latency: cfg.Latency, jitter: cfg.Jitter,
		conns: map[net.Conn]struct{}{}, servers: map[string]int{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetTarget sets the host:port new connections are forwarded to.
func (p *Proxy) SetTarget(hostport string) {
	p.mu.Lock()
	p.target = hostport
	p.mu.Unlock()
}

// SetSource sets the gateway new connections must name ("" for any).
func (p *Proxy) SetSource(gateway string) {
	p.mu.Lock()
	p.source = gateway
	p.mu.Unlock()
}

// SetCut cuts (true: closes every connection, refuses new ones) or heals
// (false) the link.
func (p *Proxy) SetCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
}

// Refused returns how many connections the proxy has refused so far: while
// cut, closed or without a target, or naming another gateway than its
// source. A test watching a cut link sees the servers' retries here.
func (p *Proxy) Refused() uint64 { return p.refused.Load() }

// Carried returns how many connections the proxy carries now (past the
// source check, not yet closed): after a heal, a test sees the servers'
// gateways come back here.
func (p *Proxy) Carried() int { return int(p.carried.Load()) }

// Servers returns the IDs of the nats-servers whose gateway connections
// the proxy carries now, as their CONNECT named them, sorted (only with a
// Source set: the proxy reads CONNECT only then). Where a server's gateway
// to a region goes is nats-server's choice: a test sees here which servers
// lose it when the target stops.
func (p *Proxy) Servers() []string {
	p.mu.Lock()
	out := make([]string, 0, len(p.servers))
	for id := range p.servers {
		out = append(out, id)
	}
	p.mu.Unlock()
	slices.Sort(out)
	return out
}

// Close stops the proxy and waits for its goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.l.Close()
	p.wg.Wait()
}

func (p *Proxy) track(cs ...net.Conn) bool {
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

func (p *Proxy) untrack(cs ...net.Conn) {
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
func (p *Proxy) delay() time.Duration {
	d := p.latency
	if p.jitter > 0 {
		p.mu.Lock()
		d += time.Duration(p.rng.Int64N(int64(p.jitter)))
		p.mu.Unlock()
	}
	return d
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target, source, refuse := p.target, p.source, p.cut || p.closed || p.target == ""
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
			p.pipe(in, out, out) // a nats-server speaks first (INFO)
		}()
		go func() {
			defer p.wg.Done()
			br := bufio.NewReaderSize(in, maxChunk)
			if source != "" {
				_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
				line, err := br.ReadString('\n')
				_ = in.SetReadDeadline(time.Time{})
				ci := connectOf(line)
				if err != nil || ci.Gateway != source {
					p.refused.Add(1)
					p.untrack(in, out)
					return
				}
				if _, err := io.WriteString(out, line); err != nil {
					p.untrack(in, out)
					return
				}
				if ci.Name != "" {
					p.mu.Lock()
					p.servers[ci.Name]++
					p.mu.Unlock()
					defer func() {
						p.mu.Lock()
						if p.servers[ci.Name]--; p.servers[ci.Name] <= 0 {
							delete(p.servers, ci.Name)
						}
						p.mu.Unlock()
					}()
				}
			}
			p.carried.Add(1)
			defer p.carried.Add(-1)
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
func (p *Proxy) pipe(dst, src net.Conn, r io.Reader) {
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

// connectInfo is what the proxy reads of a gateway's CONNECT: the gateway
// (region) it is of and the ID of the server that opened it.
type connectInfo struct {
	Gateway string `json:"gateway"`
	Name    string `json:"name"`
}

// connectOf returns what a CONNECT protocol line names (zero if the line
// is not one).
func connectOf(line string) connectInfo {
	var ci connectInfo
	arg, ok := strings.CutPrefix(line, "CONNECT ")
	if !ok || json.Unmarshal([]byte(strings.TrimSpace(arg)), &ci) != nil {
		return connectInfo{}
	}
	return ci
}
