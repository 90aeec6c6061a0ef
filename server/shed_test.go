package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shedYAML is the docs' four classes with max_in_flight 8: writes are shed
// from 8 requests in flight, reads from 6, test (and anything unmatched)
// from 4, critical never; a rule counts every request per client address.
const shedYAML = `
shedding:
  max_in_flight: %d
  retry_after: 3s
  classes:
    - {name: critical, match: {path_prefix: /checkout}}
    - {name: writes, match: {methods: [POST, PUT, DELETE]}}
    - {name: reads, match: {methods: [GET]}}
    - {name: test, match: {host: canary.example.com}}
`

// slowUpstream is a real upstream whose /checkout/hold requests wait
// until release is closed (and /checkout/hold2 ones until release2 is), or
// their request is cancelled, raising the requests in flight; any other
// request is answered at once.
type slowUpstream struct {
	*httptest.Server
	held              atomic.Int64 // hold requests being served
	release, release2 chan struct{}
	once, once2       sync.Once
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{release: make(chan struct{}), release2: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release := u.release
		if strings.HasSuffix(r.URL.Path, "/hold2") {
			release = u.release2
		}
		if strings.HasSuffix(r.URL.Path, "/hold") || strings.HasSuffix(r.URL.Path, "/hold2") {
			u.held.Add(1)
			defer u.held.Add(-1)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(func() { u.Release(); u.Release2(); u.Close() })
	return u
}

// Release lets every /checkout/hold request (and every later one) finish.
func (u *slowUpstream) Release() { u.once.Do(func() { close(u.release) }) }

// Release2 lets every /checkout/hold2 request (and every later one) finish.
func (u *slowUpstream) Release2() { u.once2.Do(func() { close(u.release2) }) }

// holder sends requests that the slow upstream holds, and collects their
// statuses.
type holder struct {
	t      *testing.T
	url    string // the proxy's or the middleware's base URL
	path   string // default /checkout/hold
	wg     sync.WaitGroup
	mu     sync.Mutex
	status []int
}

// hold sends n POST /checkout/hold (class critical; or h.path) and waits
// until the upstream holds them all: n more requests are in flight.
func (h *holder) hold(u *slowUpstream, n int) {
	h.t.Helper()
	path := h.path
	if path == "" {
		path = "/checkout/hold"
	}
	want := u.held.Load() + int64(n)
	for range n {
		h.wg.Add(1)
		c := clientFrom(nextHolderAddr())
		go func() {
			defer h.wg.Done()
			defer c.CloseIdleConnections()
			res, err := c.Post(h.url+path, "text/plain", nil)
			st := -1
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				st = res.StatusCode
			}
			h.mu.Lock()
			h.status = append(h.status, st)
			h.mu.Unlock()
		}()
	}
	require.Eventually(h.t, func() bool { return u.held.Load() == want }, wait, poll)
}

// holderAddrs numbers the loopback source addresses of held requests.
var holderAddrs atomic.Uint32

// nextHolderAddr is a loopback address for one held request, 127.10.0.1
// to 127.249.0.1 in turn: each held request comes from a client of its
// own, in a network of its own, which the shedder's shares (max_in_flight
// / 4 per address, / 2 - 1 per /24) let in.
func nextHolderAddr() string {
	return "127." + strconv.Itoa(10+int(holderAddrs.Add(1)%240)) + ".0.1"
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (Linux routes all of 127.0.0.0/8 to lo).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: wait}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// done waits for every held request and returns their statuses.
func (h *holder) done() []int {
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status
}

// probes are one request of each class (and an unmatched one), answered
// at once by the upstream.
var probes = []struct {
	class, method, path, host string
}{
	{"critical", "GET", "/checkout/cart", ""},
	{"writes", "POST", "/cart", ""},
	{"reads", "GET", "/cart", ""},
	{"test", "HEAD", "/", "canary.example.com"},
	{"test", "OPTIONS", "/", ""}, // unmatched: the lowest class
}

// expectShed sends every probe to base and checks that exactly the
// classes in shed are shed. It returns how many probes went on.
func expectShed(ta *testApp, base string, shed ...string) (passed int) {
	ta.T.Helper()
	for _, p := range probes {
		var hdr []string
		if p.host != "" {
			hdr = []string{"Host", p.host}
		}
		r := ta.Do(p.method, base+p.path, "", hdr...)
		if !containsStr(shed, p.class) {
			require.Equal(ta.T, http.StatusOK, r.Status, "%s %s (%s) goes on: %s", p.method, p.path, p.class, r.Body)
			passed++
			continue
		}
		require.Equal(ta.T, http.StatusServiceUnavailable, r.Status, "%s %s (%s) is shed", p.method, p.path, p.class)
		assert.Equal(ta.T, "3", r.Header.Get("Retry-After"))
		assert.Empty(ta.T, r.Header.Get("RateLimit"), "no RateLimit fields: no rule denied it")
		assert.Empty(ta.T, r.Header.Get("X-RateLimit-Limit"))
		if p.method != "HEAD" {
			assert.Equal(ta.T, map[string]any{"error": "overloaded", "shed": true, "class": p.class, "retry_after_ms": 3000.0}, r.JSON(ta.T))
		}
	}
	return passed
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (ta *testApp) gauge(name string, labels ...string) float64 {
	ta.T.Helper()
	v, ok := servertest.MetricValue(ta.Scrape(), name, labels...)
	require.True(ta.T, ok, "no %s%v", name, labels)
	return v
}

// Proxy mode with a real upstream: slow requests raise the requests in
// flight; the lowest class is shed first, then the next, and the highest
// never; a shed request reaches no rule and no upstream.
func TestShedProxy(t *testing.T) {
	up := newSlowUpstream(t)
	ta := startApp(t, fmt.Sprintf(shedYAML, 8)+servertest.ProxyYAML(up.URL, "", `
  - {name: all, limit: 1000, window: 1m}
`))
	base := "http://" + ta.App.ProxyAddr().String()
	h := &holder{t: t, url: base}
	counted := 0

	counted += expectShed(ta, base)
	h.hold(up, 4)
	counted += 4
	assert.EqualValues(t, 4, ta.gauge("geolimit_in_flight"))
	assert.EqualValues(t, 1, ta.gauge("geolimit_shed_level"))
	counted += expectShed(ta, base, "test")
	h.hold(up, 2)
	counted += 2
	counted += expectShed(ta, base, "test", "reads")
	h.hold(up, 2)
	counted += 2
	counted += expectShed(ta, base, "test", "reads", "writes")
	h.hold(up, 8) // the highest class is never shed, however many are in flight
	counted += 8
	counted += expectShed(ta, base, "test", "reads", "writes")
	assert.EqualValues(t, 16, ta.gauge("geolimit_in_flight"))
	assert.EqualValues(t, 3, ta.gauge("geolimit_shed_level"))
	assert.EqualValues(t, 8, ta.gauge("geolimit_shed_max_in_flight"))

	mfs := ta.Scrape()
	for class, want := range map[string]float64{"critical": 0, "writes": 2, "reads": 3, "test": 2 * 4} {
		v, ok := servertest.MetricValue(mfs, "geolimit_shed_total", "class", class)
		require.True(t, ok, class)
		assert.Equal(t, want, v, "geolimit_shed_total{class=%q}", class)
	}
	assert.EqualValues(t, counted-16, ta.KeyTotal("all", "127.0.0.1"), "no rule counted a shed request (the 16 held came from other addresses)")
	assert.EqualValues(t, counted, ta.Decisions("all", "allowed"))

	up.Release()
	for _, st := range h.done() {
		assert.Equal(t, http.StatusOK, st, "held requests")
	}
	require.Eventually(t, func() bool { return ta.gauge("geolimit_in_flight") == 0 }, wait, poll)
	expectShed(ta, base)
}

// A request ends, and leaves the count, however its response ends: an
// upstream that fails, a client that goes away before the response or in
// the middle of its body.
func TestShedInFlightEnds(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var started atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		switch r.URL.Path {
		case "/fail": // the connection closes without an answer: 502
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		case "/wait": // no answer until the client goes away
			<-r.Context().Done()
		case "/body": // part of a streamed body, then nothing until the client goes away
			_, _ = w.Write([]byte("part"))
			_ = http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	t.Cleanup(up.Close)
	ta := startApp(t, fmt.Sprintf(shedYAML, 8)+servertest.ProxyYAML(up.URL, "", "  - {name: all, limit: 1000, window: 1m}\n"))
	base := "http://" + ta.App.ProxyAddr().String()
	inFlight := func() float64 { return ta.gauge("geolimit_in_flight") }

	r := ta.Proxy("GET", "/fail")
	assert.Equal(t, http.StatusBadGateway, r.Status)
	assert.Zero(t, inFlight(), "upstream failure")

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/wait", nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return started.Load() == 2 }, wait, poll)
	assert.EqualValues(t, 1, inFlight())
	cancel()
	require.Error(t, <-errc)
	require.Eventually(t, func() bool { return inFlight() == 0 }, wait, poll, "client gone before the response")

	conn, err := net.Dial("tcp", ta.App.ProxyAddr().String())
	require.NoError(t, err)
	_, err = conn.Write([]byte("GET /body HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
	buf := make([]byte, 512)
	n, err := conn.Read(buf) // the headers: the proxy streams the body as it comes
	require.NoError(t, err)
	require.Contains(t, string(buf[:n]), "200 OK")
	assert.EqualValues(t, 1, inFlight())
	conn.Close()
	require.Eventually(t, func() bool { return inFlight() == 0 }, wait, poll, "client gone in the middle of the body")
}

// The middleware sheds as proxy mode does, with the same count of the
// node's requests in flight.
func TestShedMiddleware(t *testing.T) {
	up := newSlowUpstream(t)
	ta := startApp(t, fmt.Sprintf(shedYAML, 8)+servertest.ProxyYAML(up.URL, "", "  - {name: all, limit: 1000, window: 1m}\n"))
	var calls atomic.Int64
	mw := httptest.NewServer(ta.App.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path == "/checkout/hold" {
			<-up.release
		}
	})))
	t.Cleanup(mw.Close)
	t.Cleanup(up.Release)
	proxyBase := "http://" + ta.App.ProxyAddr().String()
	h := &holder{t: t, url: proxyBase}
	h.hold(up, 4) // through the proxy
	n := expectShed(ta, mw.URL, "test")
	assert.EqualValues(t, n, calls.Load(), "shed requests never reach the handler")
	mh := &holder{t: t, url: mw.URL}
	mh.wg.Add(2)
	for range 2 {
		c := clientFrom(nextHolderAddr())
		go func() {
			defer mh.wg.Done()
			defer c.CloseIdleConnections()
			res, err := c.Post(mw.URL+"/checkout/hold", "text/plain", nil)
			if err == nil {
				res.Body.Close()
			}
		}()
	}
	require.Eventually(t, func() bool { return ta.gauge("geolimit_in_flight") == 6 }, wait, poll)
	expectShed(ta, proxyBase, "test", "reads")
	expectShed(ta, mw.URL, "test", "reads")
	up.Release()
	h.done()
	mh.done()
	require.Eventually(t, func() bool { return ta.gauge("geolimit_in_flight") == 0 }, wait, poll)
}

// Forward auth and the decision API answer questions about requests that
// run elsewhere: they are neither shed nor counted in flight.
func TestShedNotForwardAuthOrAPI(t *testing.T) {
	up := newSlowUpstream(t)
	ta := startApp(t, fmt.Sprintf(shedYAML, 2)+`
listen: {api: "127.0.0.1:0", proxy: "127.0.0.1:0", forward_auth: "127.0.0.1:0"}
proxy: {upstream: "`+up.URL+`"}
rules:
  - {name: all, limit: 1000, window: 1m}
`)
	base := "http://" + ta.App.ProxyAddr().String()
	h := &holder{t: t, url: base}
	h.hold(up, 2)
	expectShed(ta, base, "test", "reads", "writes")
	r := ta.Do("GET", "http://"+ta.App.ForwardAuthAddr().String()+"/", "", "Host", "canary.example.com")
	assert.Equal(t, http.StatusOK, r.Status, "forward auth sheds nothing")
	r = ta.Post("/v1/check", `{"rule":"all","key":"k"}`)
	assert.Equal(t, http.StatusOK, r.Status, "the API sheds nothing")
	assert.EqualValues(t, 2, ta.gauge("geolimit_in_flight"))
	up.Release()
	h.done()
}

// A reload applies new classes and thresholds to the next request and
// keeps the requests in flight counted.
func TestShedReload(t *testing.T) {
	up := newSlowUpstream(t)
	rules := servertest.ProxyYAML(up.URL, "", "  - {name: all, limit: 1000, window: 1m}\n")
	ta := startApp(t, fmt.Sprintf(shedYAML, 8)+rules)
	base := "http://" + ta.App.ProxyAddr().String()
	h := &holder{t: t, url: base}
	h.hold(up, 6)
	expectShed(ta, base, "test", "reads")

	ta.WriteConfig(fmt.Sprintf(shedYAML, 100) + rules)
	require.NoError(t, ta.App.Reload())
	assert.EqualValues(t, 6, ta.gauge("geolimit_in_flight"), "a reload keeps the count")
	assert.EqualValues(t, 100, ta.gauge("geolimit_shed_max_in_flight"))
	expectShed(ta, base)
	shedTest, _ := servertest.MetricValue(ta.Scrape(), "geolimit_shed_total", "class", "test")
	assert.EqualValues(t, 2, shedTest, "the counter of a class kept by name goes on")

	// Fewer classes: reads are now the lowest and shed from 4.
	ta.WriteConfig(`
shedding:
  max_in_flight: 8
  classes:
    - {name: critical, match: {path_prefix: /checkout}}
    - {name: reads, match: {methods: [GET]}}
` + rules)
	require.NoError(t, ta.App.Reload())
	r := ta.Proxy("GET", "/cart")
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	assert.Equal(t, "1", r.Header.Get("Retry-After"), "retry_after's default")
	assert.Equal(t, "reads", r.JSON(t)["class"])
	_, ok := servertest.MetricValue(ta.Scrape(), "geolimit_shed_total", "class", "test")
	assert.False(t, ok, "a removed class is no longer exported")

	// An invalid section changes nothing.
	ta.WriteConfig("shedding: {max_in_flight: 8, classes: [{name: only}]}\n" + rules)
	require.ErrorContains(t, ta.App.Reload(), "shedding.classes: at least two classes")
	assert.Equal(t, http.StatusServiceUnavailable, ta.Proxy("GET", "/cart").Status)

	// Off: nothing is shed, the count goes on.
	ta.WriteConfig(rules)
	require.NoError(t, ta.App.Reload())
	assert.Equal(t, http.StatusOK, ta.Proxy("HEAD", "/").Status)
	assert.EqualValues(t, 6, ta.gauge("geolimit_in_flight"))
	assert.EqualValues(t, 0, ta.gauge("geolimit_shed_max_in_flight"))
	up.Release()
	h.done()
	require.Eventually(t, func() bool { return ta.gauge("geolimit_in_flight") == 0 }, wait, poll)
}

// With a target latency, requests in flight weigh more while the requests
// take longer than the target: one slow request in flight sheds what
// eight would. The durations come from the App's manual clock.
func TestShedLatencyProxy(t *testing.T) {
	up := newSlowUpstream(t)
	yaml := strings.Replace(fmt.Sprintf(shedYAML, 8), "retry_after: 3s", "retry_after: 3s\n  target_latency: 100ms", 1)
	ta := startApp(t, yaml+servertest.ProxyYAML(up.URL, "", "  - {name: all, limit: 1000, window: 1m}\n"))
	base := "http://" + ta.App.ProxyAddr().String()
	latency := func() float64 { return ta.gauge("geolimit_shed_latency_seconds") }

	slow := &holder{t: t, url: base}
	slow.hold(up, 1)
	expectShed(ta, base) // one in flight, no slow request seen yet
	ta.Clk.Advance(10 * time.Second)
	up.Release()
	slow.done()
	require.Eventually(t, func() bool { return ta.gauge("geolimit_in_flight") == 0 }, wait, poll)
	assert.InDelta(t, 10, latency(), 1e-9, "the first slow request is the average")

	again := &holder{t: t, url: base, path: "/checkout/hold2"}
	again.hold(up, 1)
	// One in flight weighs 1 x 10s / 100ms = 100: every class but the
	// first is shed (each critical probe that passes takes 0s on the
	// manual clock and lowers the average by 1/8).
	expectShed(ta, base, "test", "reads", "writes")
	assert.EqualValues(t, 3, ta.gauge("geolimit_shed_level"))

	for range 40 {
		require.Equal(t, http.StatusOK, ta.Proxy("GET", "/checkout/fast").Status)
	}
	assert.Less(t, latency(), 0.1, "fast requests bring the average under the target")
	expectShed(ta, base) // the same one in flight weighs 1 again
	assert.EqualValues(t, 0, ta.gauge("geolimit_shed_level"))
	up.Release2()
	again.done()
}

// slowBodies opens n connections to addr from the loopback address ip,
// each sending a POST to path that announces a body of 1 000 bytes, and
// sends one byte of it once the server has started reading the body (its
// "100 Continue"): the client trickles, the server waits. Closing the
// returned connections ends them.
func slowBodies(t *testing.T, addr, ip, path string, n int) []net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: wait}
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: shop\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n", path)
		require.NoError(t, err)
	}
	for _, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
		buf := make([]byte, 64)
		got := ""
		for !strings.Contains(got, "\r\n\r\n") {
			m, err := c.Read(buf)
			require.NoError(t, err, "the server reads the body: %q", got)
			got += string(buf[:m])
		}
		require.Contains(t, got, "100 Continue")
		_, err := c.Write([]byte("a"))
		require.NoError(t, err)
	}
	return conns
}

// TestShedSlowBodies: thirty connections of one client trickling their
// bodies (max_in_flight 20) shed none of another client's requests: a
// request counts in flight once its body is read, not while it trickles;
// and thirty requests of one client held by the upstream take only its
// share (max_in_flight / 4) of the requests in flight, the rest shed, so
// the other client is served too.
func TestShedSlowBodies(t *testing.T) {
	up := newSlowUpstream(t)
	// The upstream reads bodies, as one that takes uploads would.
	reader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upload" {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		up.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(reader.Close)
	ta := startApp(t, fmt.Sprintf(shedYAML, 20)+servertest.ProxyYAML(reader.URL, "", "  - {name: all, limit: 1000, window: 1m}\n"))
	addr := ta.App.ProxyAddr().String()
	base := "http://" + addr

	conns := slowBodies(t, addr, "127.0.0.2", "/upload", 30)
	assert.EqualValues(t, 0, ta.gauge("geolimit_in_flight"), "trickling bodies are not in flight")
	for range 3 {
		expectShed(ta, base) // another client: every class served
	}
	assert.EqualValues(t, 0, ta.KeyTotal("all", "127.0.0.2"), "no rule decided the trickling requests yet")

	// One of them sends its whole body: it is served.
	_, err := conns[0].Write([]byte(strings.Repeat("a", 999)))
	require.NoError(t, err)
	require.NoError(t, conns[0].SetReadDeadline(time.Now().Add(wait)))
	br := bufio.NewReader(conns[0])
	res, err := http.ReadResponse(br, nil)
	for err == nil && res.StatusCode == http.StatusContinue { // the upstream's, passed on
		res, err = http.ReadResponse(br, nil)
	}
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	res.Body.Close()

	// Thirty requests of one client that the upstream holds: five (20 / 4)
	// are in flight, twenty-five shed, whatever their class.
	c := clientFrom("127.0.0.3")
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := -1
			if res, err := c.Post(base+"/checkout/hold", "text/plain", strings.NewReader("order")); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				st = res.StatusCode
			}
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		}()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return statuses[http.StatusServiceUnavailable] == 25 && up.held.Load() == 5
	}, wait, poll)
	assert.EqualValues(t, 5, ta.gauge("geolimit_in_flight"))
	assert.EqualValues(t, 25, ta.gauge("geolimit_shed_client_total"))
	expectShed(ta, base) // the other client: every class served
	up.Release()
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: 5, http.StatusServiceUnavailable: 25}, statuses)
	require.Eventually(t, func() bool { return ta.gauge("geolimit_in_flight") == 0 }, wait, poll)
}

// TestShedManyAddresses: one client holding requests from eight addresses
// of one network (127.0.1.0/24; max_in_flight 20, five per address) takes
// the network's share (max_in_flight / 2 - 1: 9), not five on each, and
// the other client (127.0.0.1) is served in every class.
func TestShedManyAddresses(t *testing.T) {
	up := newSlowUpstream(t)
	ta := startApp(t, fmt.Sprintf(shedYAML, 20)+servertest.ProxyYAML(up.URL, "", "  - {name: all, limit: 1000, window: 1m}\n"))
	base := "http://" + ta.App.ProxyAddr().String()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for a := range 8 {
		c := clientFrom(fmt.Sprintf("127.0.1.%d", a+1))
		defer c.CloseIdleConnections()
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := -1
				if res, err := c.Get(base + "/checkout/hold"); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					st = res.StatusCode
				}
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			}()
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return statuses[http.StatusServiceUnavailable]+int(up.held.Load()) == 40
	}, wait, poll)
	assert.EqualValues(t, 9, up.held.Load(), "the network's share in flight")
	assert.EqualValues(t, 9, ta.gauge("geolimit_in_flight"))
	expectShed(ta, base) // the other client: every class served
	up.Release()
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: 9, http.StatusServiceUnavailable: 31}, statuses)
}
