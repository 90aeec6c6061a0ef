package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/internal/bare"
)

// BenchmarkCheckServer is POST /v1/check through net/http's server, in
// process: a keep-alive connection whose reads hand over one request after
// another and whose writes are discarded, so that everything but the
// sockets is measured (request parsing, the handler, the response's
// headers and body). "bare" is the baseline of scripts/bench-http.sh
// (package bare: a handler that reads the body and answers a fixed
// /v1/check body); "bare-fields" is that handler writing the RateLimit
// header fields of the API's answer too, fixed (bare.FieldsHandler: what
// net/http costs to write the whole answer); "check" is the API handler.
// The difference between bare and check is what the decision API adds to
// a request, in time and allocations; between bare-fields and check, what
// it adds beyond net/http's own work on the same answer.
func BenchmarkCheckServer(b *testing.B) {
	var reqs [][]byte
	for _, k := range benchKeys(1000) {
		body := `{"rule":"bench","key":"` + k + `","cost":1}`
		reqs = append(reqs, []byte("POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1:18080\r\nContent-Type: application/json\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n"+body))
	}
	b.Run("bare", func(b *testing.B) {
		serveConn(b, http.HandlerFunc(bare.Handler), reqs)
	})
	b.Run("bare-fields", func(b *testing.B) {
		serveConn(b, http.HandlerFunc(bare.FieldsHandler), reqs)
	})
	b.Run("check", func(b *testing.B) {
		// A clock read per request, not the daemon's coarse clock: its
		// refresh (1 ms) is a cost per second, not per request, that an
		// instruction count under valgrind, which runs the requests ~50x
		// slower, would charge to each request (about 2 700 instructions
		// per millisecond).
		serveConn(b, benchAppClock(b, clock.Real{}).apiHandler(), reqs)
	})
}

// serveConn serves b.N requests, cycling over reqs, on one connection of
// an http.Server configured like the daemon's API listener, and fails on
// any answer but 200.
func serveConn(b *testing.B, h http.Handler, reqs [][]byte) {
	c := &reqConn{reqs: reqs, max: b.N, closed: make(chan struct{})}
	ln := &oneConnListener{c: c, done: make(chan struct{})}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	go func() { _ = srv.Serve(ln) }()
	<-c.closed
	cpu := processCPU() - cpu0
	b.StopTimer()
	// The process's CPU time per request (every thread, the collector's
	// too) is steadier than ns/op on a machine shared with other work.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	_ = srv.Close()
	if c.bad > 0 {
		b.Fatalf("%d answers were not 200 OK", c.bad)
	}
}

// processCPU is the user and system CPU time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reqConn is a client connection that sends the next request as soon as
// the server reads, and discards what the server writes.
type reqConn struct {
	reqs     [][]byte
	max, n   int
	cur      []byte
	bad      int
	once     sync.Once
	closed   chan struct{}
	mu       sync.Mutex
	isClosed bool
}

var ok200 = []byte("HTTP/1.1 200 OK\r\n")

func (c *reqConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) == 0 {
		if c.n == c.max || c.isClosed {
			return 0, io.EOF
		}
		c.cur = c.reqs[c.n%len(c.reqs)]
		c.n++
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

func (c *reqConn) Write(p []byte) (int, error) {
	if len(p) < len(ok200) || string(p[:len(ok200)]) != string(ok200) {
		c.bad++
	}
	return len(p), nil
}

func (c *reqConn) Close() error {
	c.mu.Lock()
	c.isClosed = true
	c.mu.Unlock()
	c.once.Do(func() { close(c.closed) })
	return nil
}

var benchAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 18080}

func (c *reqConn) LocalAddr() net.Addr                { return benchAddr }
func (c *reqConn) RemoteAddr() net.Addr               { return benchAddr }
func (c *reqConn) SetDeadline(t time.Time) error      { return nil }
func (c *reqConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *reqConn) SetWriteDeadline(t time.Time) error { return nil }

// oneConnListener accepts c once, then waits to be closed.
type oneConnListener struct {
	c        net.Conn
	accepted bool
	done     chan struct{}
	once     sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.accepted {
		l.accepted = true
		return l.c, nil
	}
	<-l.done
	return nil, errors.New("listener closed")
}

func (l *oneConnListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneConnListener) Addr() net.Addr { return benchAddr }

// TestBareFieldsAnswerLikeCheck: the baseline bare.FieldsHandler writes
// the header fields of an allowed POST /v1/check answer, no more and no
// fewer, so that BenchmarkCheckServer compares like with like.
func TestBareFieldsAnswerLikeCheck(t *testing.T) {
	names := func(h http.Handler) []string {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"rule":"bench","key":"10.0.0.1"}`))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var out []string
		for k := range w.Result().Header {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	assert.Equal(t, names(benchApp(t).apiHandler()), names(http.HandlerFunc(bare.FieldsHandler)))
}
