// Package spoa is a Stream Processing Offload Agent for HAProxy: HAProxy's
// SPOE filter sends it a geolimit-check message (MessageName) per request,
// over SPOP, and it answers with transaction variables that HAProxy's
// http-request and http-after-response rules turn into a 429 and the
// RateLimit headers. Like forward auth, it classifies the request into an
// Origin and lets the node's pipeline decide it (frontend.Env.DecideOrigin);
// it decides nothing itself, and renders the answer as variables.
//
//	ag := spoa.New(env, spoa.Config{IdleTimeout: 2 * time.Minute})
//	go ag.Serve(ln)              // returns ErrClosed after Shutdown
//	defer ag.Shutdown(ctx)       // answers what is in flight, then disconnects
//
// The agent offers SPOP 2.0 with no capability (no pipelining, async or
// fragmentation): HAProxy sends one NOTIFY at a time on a connection and
// opens more connections for concurrency. The variables it sets, under the
// var-prefix of the SPOE configuration (geolimit below), in the txn scope:
//
//	txn.geolimit.allowed                1 or 0, once the request is decided
//	txn.geolimit.status                 the deny status (forward_auth.deny_status), when denied;
//	                                    400 when the request could not be decided
//	txn.geolimit.retry_after            Retry-After in seconds, when denied
//	txn.geolimit.body                   the JSON body of a denial, as proxy mode writes it
//	txn.geolimit.ratelimit_policy       the RateLimit-Policy header, when a rule applied
//	txn.geolimit.ratelimit              RateLimit
//	txn.geolimit.x_ratelimit_limit      X-RateLimit-Limit
//	txn.geolimit.x_ratelimit_remaining  X-RateLimit-Remaining
//	txn.geolimit.x_ratelimit_reset      X-RateLimit-Reset
//	txn.geolimit.repeat                 1 when the request repeats one decided for its idempotency key
//	txn.geolimit.error                  why the request could not be decided (nothing was counted)
//
// The protocol has no authentication: the listener belongs on loopback or a
// private network (listen.spoa, spoa.insecure).
package spoa

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/server/frontend"
)

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("spoa: agent closed")

// Defaults of Config.
const (
	// DefaultMaxFrameSize is HAProxy's largest frame with its default
	// tune.bufsize (16384 less the length).
	DefaultMaxFrameSize = 16380
	// MaxFrameSize bounds Config.MaxFrameSize: a connection holds two
	// buffers of this size at most.
	MaxFrameSize   = 1 << 20
	defaultTimeout = 5 * time.Second
)

// Config tunes an Agent. The zero value is usable.
type Config struct {
	// MaxFrameSize is the largest frame the agent reads and offers in its
	// HELLO, in bytes (without the 4-byte length); HAProxy offers
	// tune.bufsize less 4. Default DefaultMaxFrameSize; at most
	// MaxFrameSize, at least 256.
	MaxFrameSize int
	// IdleTimeout closes a connection on which no frame starts for this
	// long; it must exceed the SPOE configuration's "timeout idle". 0: never.
	IdleTimeout time.Duration
	// FrameTimeout bounds reading the rest of a frame once its length has
	// arrived, and writing a frame. Default 5s.
	FrameTimeout time.Duration
	// Latency observes the time to decide each message, from its decoded
	// arguments to the answer built, in seconds; nil for none.
	Latency prometheus.Observer
	// MaxConnsPerClient caps the open connections of one client address.
	// A connection beyond it is not refused: it takes the place of that
	// client's stalest connection (one that never finished its HELLO
	// first, the oldest of those; else the one that finished a frame
	// longest ago), which is closed. HAProxy, whose connections carry
	// frames, keeps its place among idle connections from its own address
	// (on loopback every local process shares it). 0: no cap.
	MaxConnsPerClient int
}

// Agent answers HAProxy's SPOE messages. Its methods are safe for
// concurrent use; Shutdown is called once.
type Agent struct {
	env frontend.Env
	cfg Config

	mu      sync.Mutex
	lns     map[net.Listener]struct{}
	conns   map[*conn]struct{}
	closing atomic.Bool
	wg      sync.WaitGroup // connections
	seqs    uint64         // the last conn.seq; guarded by mu

	warned atomic.Bool
	// perPeer counts the open connections of each client address, those
	// already closed for a newer one's place not counted; guarded by mu.
	perPeer map[netip.Addr]int
	// replaced counts connections closed for a newer one's place.
	replaced atomic.Uint64
}

// New returns an agent that decides with env's node and rules.
func New(env frontend.Env, cfg Config) *Agent {
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	cfg.MaxFrameSize = min(max(cfg.MaxFrameSize, minFrameSize), MaxFrameSize)
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = defaultTimeout
	}
	if cfg.Latency == nil {
		cfg.Latency = prometheus.ObserverFunc(func(float64) {})
	}
	return &Agent{env: env, cfg: cfg, lns: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, perPeer: map[netip.Addr]int{}}
}

// Replaced returns how many connections were closed to make room for a
// newer one of the same client (Config.MaxConnsPerClient).
func (a *Agent) Replaced() uint64 { return a.replaced.Load() }

// Conns returns the number of open connections.
func (a *Agent) Conns() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// Serve accepts HAProxy's connections on l and serves each in a goroutine
// of its own until it closes or Shutdown. It returns ErrClosed after
// Shutdown, else the error that stopped it; l is closed either way.
func (a *Agent) Serve(l net.Listener) error {
	a.mu.Lock()
	if a.closing.Load() {
		a.mu.Unlock()
		_ = l.Close()
		return ErrClosed
	}
	a.lns[l] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.lns, l)
		a.mu.Unlock()
		_ = l.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if a.closing.Load() {
				return ErrClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() { // too many open files, as net/http
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				a.env.Log.Warn("spoa: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("spoa: accept: %w", err)
		}
		backoff = 0
		c := a.newConn(nc)
		if c == nil {
			_ = nc.Close()
			continue
		}
		go c.serve()
	}
}

// Shutdown closes the listeners and then each connection once its frame
// in progress is answered, with a DISCONNECT (HAProxy then sends its next
// messages elsewhere or, with nothing left, applies its on-error policy).
// When ctx ends first, it closes the remaining connections at once and
// returns ctx's error.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.mu.Lock()
	a.closing.Store(true)
	for l := range a.lns {
		_ = l.Close()
	}
	for c := range a.conns {
		c.wake()
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		for c := range a.conns {
			_ = c.nc.Close()
		}
		a.mu.Unlock()
		<-done
		return fmt.Errorf("spoa: drain: %w", ctx.Err())
	}
}

// conn is one HAProxy connection. Only its goroutine uses it, but for
// wake, which Shutdown calls.
type conn struct {
	a    *Agent
	nc   net.Conn
	peer netip.Addr
	// max is the frame size agreed in the HELLO (Config.MaxFrameSize before).
	max  int
	rbuf []byte
	enc  encoder
	msgs []message
	args []arg
	// briefs are the NOTIFY's answers in brief, for a full one that does
	// not fit the frame.
	briefs []brief
	// idle: waiting for a frame to start; wake may then interrupt the
	// read. Guarded by mu, so that no wake lands once a frame has started.
	mu   sync.Mutex
	idle bool
	// seq orders connections by their accept; last is the time (unix
	// nanoseconds) the last frame was read whole, 0 before the HELLO
	// (the choice of the stalest, Config.MaxConnsPerClient).
	seq  uint64
	last atomic.Int64
	// gone is set when the connection was closed for a newer one's place
	// (guarded by Agent.mu).
	gone bool
}

func (a *Agent) newConn(nc net.Conn) *conn {
	c := &conn{a: a, nc: nc, max: a.cfg.MaxFrameSize}
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		c.peer = ap.Addr().Unmap()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing.Load() {
		return nil
	}
	if m := a.cfg.MaxConnsPerClient; m > 0 && c.peer.IsValid() {
		if a.perPeer[c.peer] >= m {
			a.replaceStalest(c.peer)
		}
		a.perPeer[c.peer]++
	}
	a.seqs++
	c.seq = a.seqs
	a.conns[c] = struct{}{}
	a.wg.Add(1)
	return c
}

// replaceStalest closes peer's stalest connection (Config.MaxConnsPerClient)
// and stops counting it; the caller holds a.mu.
func (a *Agent) replaceStalest(peer netip.Addr) {
	var victim *conn
	for o := range a.conns {
		if o.peer != peer || o.gone {
			continue
		}
		if victim == nil || stalerThan(o, victim) {
			victim = o
		}
	}
	if victim == nil {
		return
	}
	victim.gone = true
	a.perPeer[peer]--
	a.replaced.Add(1)
	_ = victim.nc.Close()
}

// stalerThan reports whether o should give its place before v: one without
// a frame read (no HELLO) first, the older first among those; else the one
// whose last frame is older.
func stalerThan(o, v *conn) bool {
	ol, vl := o.last.Load(), v.last.Load()
	switch {
	case ol == 0 && vl == 0:
		return o.seq < v.seq
	case ol == 0 || vl == 0:
		return ol == 0
	}
	return ol < vl
}

// wake interrupts an idle connection's read so that it sees the agent
// closing; a connection inside a frame finishes it first.
func (c *conn) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle {
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

func (c *conn) setIdle(idle bool) {
	c.mu.Lock()
	c.idle = idle
	c.mu.Unlock()
}

// protoError is a violation of the protocol: the connection ends with a
// DISCONNECT of status.
type protoError struct {
	status uint32
	msg    string
}

func (e *protoError) Error() string { return "spoa: " + e.msg }

func protoErr(status uint32, format string, args ...any) error {
	return &protoError{status: status, msg: fmt.Sprintf(format, args...)}
}

// errStop ends a connection with a normal DISCONNECT.
var errStop = errors.New("spoa: stop")

func (c *conn) serve() {
	defer func() {
		_ = c.nc.Close()
		c.a.mu.Lock()
		delete(c.a.conns, c)
		if !c.gone && c.a.cfg.MaxConnsPerClient > 0 && c.peer.IsValid() {
			if c.a.perPeer[c.peer]--; c.a.perPeer[c.peer] <= 0 {
				delete(c.a.perPeer, c.peer)
			}
		}
		c.a.mu.Unlock()
		c.a.wg.Done()
	}()
	err := c.loop()
	var pe *protoError
	switch {
	case errors.As(err, &pe):
		c.a.env.Log.Debug("spoa: closing a connection that broke the protocol", "peer", c.nc.RemoteAddr().String(), "err", err)
		c.disconnect(pe.status, pe.msg)
	case errors.Is(err, errStop):
		c.disconnect(statusNormal, statusText[statusNormal])
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.disconnect(statusTimeout, statusText[statusTimeout])
	case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		c.a.env.Log.Debug("spoa: connection failed", "peer", c.nc.RemoteAddr().String(), "err", err)
	}
}

// loop runs the HELLO and then answers NOTIFY frames until the peer
// disconnects, the agent closes or something fails.
func (c *conn) loop() error {
	f, err := c.read()
	if err != nil {
		return err
	}
	if f.typ != typeHAProxyHello {
		return protoErr(statusInvalid, "first frame of type %d, want HAPROXY-HELLO", f.typ)
	}
	health, err := c.hello(f)
	if err != nil || health {
		return err
	}
	for {
		f, err := c.read()
		if err != nil {
			return err
		}
		switch f.typ {
		case typeNotify:
			if err := c.notify(f); err != nil {
				return err
			}
		case typeHAProxyDisconnect:
			return errStop
		default:
			return protoErr(statusInvalid, "frame of type %d, want NOTIFY or HAPROXY-DISCONNECT", f.typ)
		}
	}
}

// read reads the next frame. While no byte of it has arrived the
// connection is idle: it waits up to IdleTimeout, and Shutdown may wake it
// (errStop). The rest must arrive within FrameTimeout.
func (c *conn) read() (frame, error) {
	var hdr [4]byte
	c.setIdle(true)
	var dl time.Time
	if c.a.cfg.IdleTimeout > 0 {
		dl = time.Now().Add(c.a.cfg.IdleTimeout)
	}
	if err := c.nc.SetReadDeadline(dl); err != nil {
		return frame{}, err
	}
	if c.a.closing.Load() { // after the deadline: a wake from now on interrupts the read
		return frame{}, errStop
	}
	n, err := io.ReadFull(c.nc, hdr[:])
	c.setIdle(false)
	if err != nil && n == 0 && c.a.closing.Load() {
		return frame{}, errStop
	}
	if err != nil && n > 0 && errors.Is(err, os.ErrDeadlineExceeded) && c.a.closing.Load() {
		// Woken inside the length: the frame goes on.
		err = c.nc.SetReadDeadline(time.Now().Add(c.a.cfg.FrameTimeout))
		if err == nil {
			_, err = io.ReadFull(c.nc, hdr[n:])
		}
	}
	if err != nil {
		return frame{}, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > uint32(c.max) {
		return frame{}, protoErr(statusTooBig, "frame of %d bytes, over max-frame-size %d", size, c.max)
	}
	if cap(c.rbuf) < int(size) {
		c.rbuf = make([]byte, size, c.max) // c.max is ours, never the peer's choice beyond it
	}
	b := c.rbuf[:size]
	now := time.Now()
	if err := c.nc.SetReadDeadline(now.Add(c.a.cfg.FrameTimeout)); err != nil {
		return frame{}, err
	}
	if _, err := io.ReadFull(c.nc, b); err != nil {
		return frame{}, err
	}
	f, err := decodeFrame(b)
	if err != nil {
		return frame{}, protoErr(statusInvalid, "frame header: %v", err)
	}
	c.last.Store(now.UnixNano())
	return f, nil
}

// write sends the frame in c.enc; a frame that does not fit in c.max is
// reported as false, unsent.
func (c *conn) write() (bool, error) {
	b, ok := c.enc.endFrame()
	if !ok {
		return false, nil
	}
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.a.cfg.FrameTimeout)); err != nil {
		return true, err
	}
	_, err := c.nc.Write(b)
	return true, err
}

// hello answers HAPROXY-HELLO with AGENT-HELLO; health reports a health
// check, after whose answer the connection ends.
func (c *conn) hello(f frame) (health bool, err error) {
	var versions, caps []byte
	var haveVersions, haveCaps, haveSize bool
	var size uint64
	d := decoder{b: f.payload}
	for len(d.b) > 0 && d.err == nil {
		k, v := d.kv()
		switch string(k) {
		case helloVersions:
			versions, haveVersions = v.bytes, v.typ == dataString
		case helloFrameSize:
			size, haveSize = v.n, v.typ >= dataInt32 && v.typ <= dataUint64
		case helloCaps:
			caps, haveCaps = v.bytes, v.typ == dataString
		case helloHealthcheck:
			health = v.typ == dataBool && v.b
		}
	}
	_ = caps // none of HAProxy's capabilities is needed
	switch {
	case d.err != nil:
		return false, protoErr(statusInvalid, "HAPROXY-HELLO: %v", d.err)
	case !haveVersions:
		return false, protoErr(statusNoVersion, "HAPROXY-HELLO without supported-versions")
	case !hasVersion(string(versions)):
		return false, protoErr(statusBadVersion, "HAPROXY-HELLO supports versions %q; this agent speaks %s", versions, spopVersion)
	case !haveSize:
		return false, protoErr(statusNoFrameSize, "HAPROXY-HELLO without max-frame-size")
	case size < minFrameSize:
		return false, protoErr(statusBadFrameSize, "HAPROXY-HELLO max-frame-size %d under %d", size, minFrameSize)
	case !haveCaps:
		return false, protoErr(statusNoCapabilities, "HAPROXY-HELLO without capabilities")
	}
	c.max = int(min(size, uint64(c.a.cfg.MaxFrameSize)))
	c.enc.max = c.max + 4
	c.enc.startFrame(typeAgentHello, 0, 0)
	c.enc.kvString(helloVersion, spopVersion)
	c.enc.kvUint32(helloFrameSize, uint32(c.max))
	c.enc.kvString(helloCaps, "")
	if _, err := c.write(); err != nil {
		return false, err
	}
	return health, nil
}

// hasVersion reports whether the comma-separated list holds spopVersion.
func hasVersion(list string) bool {
	for v := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(v) == spopVersion {
			return true
		}
	}
	return false
}

// disconnect sends AGENT-DISCONNECT, best effort: the connection closes
// after it anyway.
func (c *conn) disconnect(status uint32, msg string) {
	if c.enc.max == 0 {
		c.enc.max = minFrameSize + 4
	}
	c.enc.startFrame(typeAgentDisconnect, 0, 0)
	c.enc.kvUint32(discStatus, status)
	if len(msg) > 200 {
		msg = msg[:200]
	}
	c.enc.kvString(discMessage, msg)
	_, _ = c.write()
}

// notify answers a NOTIFY frame with its ACK.
func (c *conn) notify(f frame) error {
	if f.flags&flagFin == 0 || f.flags&flagAbort != 0 {
		return protoErr(statusFragmentation, "NOTIFY without FIN or with ABORT: fragmentation was not agreed")
	}
	var err error
	c.msgs, c.args, err = decodeMessages(f.payload, c.msgs[:0], c.args[:0])
	if err != nil {
		return protoErr(statusInvalid, "NOTIFY: %v", err)
	}
	c.enc.startFrame(typeAck, f.streamID, f.frameID)
	c.briefs = c.briefs[:0]
	for _, m := range c.msgs {
		c.briefs = append(c.briefs, c.a.answer(&c.enc, m, c.peer))
	}
	clear(c.msgs) // hold no frame bytes
	clear(c.args)
	ok, err := c.write()
	if err != nil || ok {
		return err
	}
	// The answer does not fit the frame size HAProxy offered. The messages
	// were decided (and counted): say so briefly, without the RateLimit
	// headers and the body.
	c.enc.startFrame(typeAck, f.streamID, f.frameID)
	for _, b := range c.briefs {
		b.encode(&c.enc)
	}
	if ok, err = c.write(); err != nil || ok {
		return err
	}
	c.enc.startFrame(typeAck, f.streamID, f.frameID)
	c.enc.setVarInt(varStatus, 400)
	c.enc.setVarString(varError, fmt.Sprintf("the answer does not fit in max-frame-size %d; raise HAProxy's tune.bufsize", c.max))
	_, err = c.write()
	return err
}
