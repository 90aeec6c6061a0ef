package frontend

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
)

func TestShedThreshold(t *testing.T) {
	never := int64(math.MaxInt64)
	tests := []struct {
		name string
		n    int
		max  int64
		want []int64 // per class, highest first
	}{
		{"two classes", 2, 512, []int64{never, 256}},
		{"three classes", 3, 512, []int64{never, 512, 256}},
		{"four classes", 4, 512, []int64{never, 512, 384, 256}},
		{"five classes", 5, 600, []int64{never, 600, 500, 400, 300}},
		{"rounded down", 4, 10, []int64{never, 10, 7, 5}},
		{"smallest max", 2, 2, []int64{never, 1}},
		{"smallest max, many classes", 4, 2, []int64{never, 2, 1, 1}},
		{"sixteen classes, largest max", 16, config.MaxShedInFlight, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]int64, tt.n)
			for i := range got {
				got[i] = ShedThreshold(i, tt.n, tt.max)
			}
			if tt.want != nil {
				assert.Equal(t, tt.want, got)
			}
			// Whatever the numbers: the first class is never shed, the
			// last at max/2, the second at max (of three or more), each at least as late as
			// the one below it, and none before one request is in flight.
			assert.Equal(t, never, got[0])
			assert.Equal(t, tt.max/2, got[tt.n-1], "the last class at max/2")
			if tt.n > 2 {
				assert.Equal(t, tt.max, got[1], "class 1 at max")
			}
			for i := 2; i < tt.n; i++ {
				assert.LessOrEqual(t, got[i], got[i-1], "class %d no later than class %d", i, i-1)
				assert.GreaterOrEqual(t, got[i], int64(1))
			}
		})
	}
	assert.Equal(t, never, ShedThreshold(-1, 4, 512), "out of range: never")
	assert.Equal(t, never, ShedThreshold(4, 4, 512), "out of range: never")
	assert.Equal(t, never, ShedThreshold(1, 4, 0), "off: never")
}

// fourClasses is the example of the docs, with max_in_flight 8: writes
// are shed from 8 requests in flight, reads from 6, test from 4.
func fourClasses(maxInFlight int) config.Shedding {
	return config.Shedding{MaxInFlight: maxInFlight, RetryAfter: config.Duration(1500 * time.Millisecond), Classes: []config.ShedClass{
		{Name: "critical", Match: config.Match{PathPrefix: "/checkout"}},
		{Name: "writes", Match: config.Match{Methods: []string{"POST", "PUT", "DELETE"}}},
		{Name: "reads", Match: config.Match{Methods: []string{"GET"}}},
		{Name: "test", Match: config.Match{Host: "canary.example.com"}},
	}}
}

func origin(method, path, host string) *Origin {
	return &Origin{Method: method, Path: path, Host: host}
}

func TestShedClassOf(t *testing.T) {
	var s Shedder
	s.Apply(fourClasses(8))
	p := s.Policy()
	tests := []struct {
		o    *Origin
		want string
	}{
		{origin("POST", "/checkout/pay", "shop"), "critical"},
		{origin("GET", "/checkout", "canary.example.com"), "critical"},
		{origin("PUT", "/cart", "shop"), "writes"},
		{origin("put", "/cart", "shop"), "writes"},
		{origin("GET", "/cart", "shop"), "reads"},
		{origin("GET", "/cart", "canary.example.com"), "reads"},
		{origin("HEAD", "/cart", "canary.example.com:443"), "test"},
		{origin("OPTIONS", "/", "shop"), "test"}, // unmatched: the last class
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, p.ClassOf(tt.o).Name, "%s %s %s", tt.o.Method, tt.o.Host, tt.o.Path)
	}
}

// TestShedOrder fills the node with requests of the highest class and
// checks at each count which classes are shed: the lowest first, the
// highest never.
func TestShedOrder(t *testing.T) {
	var s Shedder
	s.Apply(fourClasses(8))
	reqs := map[string]*Origin{
		"critical": origin("POST", "/checkout", "shop"),
		"writes":   origin("POST", "/cart", "shop"),
		"reads":    origin("GET", "/cart", "shop"),
		"test":     origin("HEAD", "/", "canary.example.com"),
		"other":    origin("HEAD", "/", "shop"), // unmatched: test
	}
	shedAt := map[string]int64{"critical": math.MaxInt64, "writes": 8, "reads": 6, "test": 4, "other": 4}
	for n := int64(0); n <= 12; n++ {
		require.Equal(t, n, s.InFlight())
		for name, o := range reqs {
			c := s.Enter(o)
			if n >= shedAt[name] {
				require.NotNil(t, c, "%s with %d in flight: shed", name, n)
				assert.Equal(t, n, s.InFlight(), "a shed request is not counted")
				continue
			}
			require.Nil(t, c, "%s with %d in flight: goes on", name, n)
			assert.Equal(t, n+1, s.InFlight())
			s.Exit(nil, 0, true)
		}
		require.Nil(t, s.Enter(reqs["critical"]))
	}
	p := s.Policy()
	assert.EqualValues(t, 0, p.Classes[0].Shed.Load())
	assert.EqualValues(t, 5, p.Classes[1].Shed.Load(), "writes at 8..12")
	assert.EqualValues(t, 7, p.Classes[2].Shed.Load(), "reads at 6..12")
	assert.EqualValues(t, 2*9, p.Classes[3].Shed.Load(), "test and other at 4..12")
	for n, want := range map[int64]int{0: 0, 3: 0, 4: 1, 5: 1, 6: 2, 7: 2, 8: 3, 1000: 3} {
		assert.Equal(t, want, p.Level(n), "level at %d", n)
	}
}

func TestShedOff(t *testing.T) {
	var s Shedder
	o := origin("GET", "/", "x")
	assert.Nil(t, s.Enter(o), "before Apply nothing is shed")
	s.Apply(config.Shedding{})
	for range 100 {
		require.Nil(t, s.Enter(o))
	}
	assert.EqualValues(t, 101, s.InFlight(), "counted even with shedding off")
	assert.Equal(t, 0, s.Policy().Level(101))
	assert.Empty(t, s.Policy().Classes)
}

// TestShedReload swaps the classes with requests in flight: the count
// stays, the new thresholds apply to the next request, and the counters
// of classes kept by name go on.
func TestShedReload(t *testing.T) {
	var s Shedder
	s.Apply(fourClasses(8))
	for range 4 {
		require.Nil(t, s.Enter(origin("POST", "/checkout", "")))
	}
	require.NotNil(t, s.Enter(origin("HEAD", "/", "")), "test shed at 4")
	reads := s.Policy().Classes[2].Shed
	require.NotNil(t, s.Enter(origin("HEAD", "/", "")))
	for range 2 {
		require.Nil(t, s.Enter(origin("GET", "/", "")))
	}
	require.NotNil(t, s.Enter(origin("GET", "/", "")), "reads shed at 6")

	s.Apply(fourClasses(100))
	assert.EqualValues(t, 6, s.InFlight(), "a reload keeps the count")
	assert.Nil(t, s.Enter(origin("HEAD", "/", "")), "the new thresholds apply")
	assert.Same(t, reads, s.Policy().Classes[2].Shed, "a class kept by name keeps its counter")
	assert.EqualValues(t, 1, reads.Load())

	cfg := fourClasses(8)
	cfg.Classes[2].Name = "gets"
	s.Apply(cfg)
	assert.EqualValues(t, 0, s.Policy().Classes[2].Shed.Load(), "a renamed class starts afresh")
	assert.EqualValues(t, 2, s.Policy().Classes[3].Shed.Load())

	s.Apply(config.Shedding{})
	assert.EqualValues(t, 7, s.InFlight())
	for range 7 {
		s.Exit(nil, 0, true)
	}
	assert.Zero(t, s.InFlight())
}

func TestWriteShed(t *testing.T) {
	var s Shedder
	s.Apply(fourClasses(2))
	require.Nil(t, s.Enter(origin("GET", "/", "")))
	c := s.Enter(origin("GET", "/", ""))
	require.NotNil(t, c)
	w := httptest.NewRecorder()
	WriteShed(w, c)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "2", w.Header().Get("Retry-After"), "1.5s rounded up")
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Empty(t, w.Header().Get("RateLimit"))
	assert.Empty(t, w.Header().Get("RateLimit-Policy"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, map[string]any{"error": "overloaded", "shed": true, "class": "reads", "retry_after_ms": 2000.0}, body)
}

// TestShedConcurrent enters and exits from many goroutines at once,
// with reloads between: no request is lost from the count.
func TestShedConcurrent(t *testing.T) {
	var s Shedder
	s.Apply(fourClasses(16))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := origin([]string{"GET", "POST", "HEAD"}[g%3], "/", "")
			for i := range 2000 {
				if g == 0 && i%100 == 0 {
					s.Apply(fourClasses(16 + i%7))
				}
				if s.Enter(o) == nil {
					s.Exit(nil, 0, true)
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, s.InFlight())
}

func BenchmarkShedGate(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  config.Shedding
		busy int
	}{
		{"off", config.Shedding{}, 0},
		{"idle", fourClasses(512), 0},
		{"loaded", fourClasses(512), 300}, // past the lowest threshold: the request is classified
		{"latency", withTarget(fourClasses(512)), 300},
		{"client", fourClasses(512), 0}, // a client address: counted per client too
	} {
		b.Run(bc.name, func(b *testing.B) {
			var s Shedder
			s.Apply(bc.cfg)
			for range bc.busy {
				s.Enter(origin("POST", "/checkout", ""))
			}
			o := origin("GET", "/cart", "shop")
			if bc.name == "client" {
				o.IP = netip.MustParseAddr("192.0.2.7")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if s.Enter(o) == nil {
					s.Exit(o, int64(i&0xff)*int64(time.Millisecond), true)
				}
			}
		})
	}
}

// BenchmarkShedGateParallel is the gate from every core at once: the
// requests in flight are one atomic counter shared by all.
func BenchmarkShedGateParallel(b *testing.B) {
	var s Shedder
	s.Apply(fourClasses(1 << 20))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		o := origin("GET", "/cart", "shop")
		for pb.Next() {
			if s.Enter(o) == nil {
				s.Exit(nil, 0, true)
			}
		}
	})
}

func TestShedWeigh(t *testing.T) {
	ms := int64(time.Millisecond)
	p := &ShedPolicy{Target: 100 * ms}
	tests := []struct {
		name              string
		inFlight, latency int64
		want              int64
	}{
		{"no latency yet", 10, 0, 10},
		{"below target", 10, 50 * ms, 10},
		{"at target", 10, 100 * ms, 10},
		{"twice the target", 10, 200 * ms, 20},
		{"rounded down", 3, 150 * ms, 4},
		{"nothing in flight", 0, 10_000 * ms, 0},
		{"huge latency", 1 << 30, math.MaxInt64, 1 << 62},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, p.Weigh(tt.inFlight, tt.latency), tt.name)
	}
	off := &ShedPolicy{}
	assert.EqualValues(t, 10, off.Weigh(10, 10_000*ms), "no target: in flight alone")
}

// TestShedLatency: requests that take four times the target make each
// request in flight weigh four; the average follows the durations of the
// requests that pass the rules only, and falls back as they speed up.
func TestShedLatency(t *testing.T) {
	ms := int64(time.Millisecond)
	cfg := fourClasses(16) // test from 8, reads from 12, writes from 16
	cfg.TargetLatency = config.Duration(100 * time.Millisecond)
	var s Shedder
	s.Apply(cfg)
	get := origin("GET", "/cart", "")
	head := origin("HEAD", "/", "")

	require.Nil(t, s.Enter(get))
	s.Exit(nil, 400*ms, true) // the first sample is the average
	assert.Equal(t, 400*time.Millisecond, s.Latency())
	require.Nil(t, s.Enter(get))
	s.Exit(nil, time.Microsecond.Nanoseconds(), false) // a denial: not averaged
	assert.Equal(t, 400*time.Millisecond, s.Latency())

	for range 2 {
		require.Nil(t, s.Enter(origin("POST", "/checkout", "")))
	}
	// 2 in flight weigh 2 x 4 = 8: test is shed, reads are not.
	assert.Equal(t, 1, s.Level())
	assert.NotNil(t, s.Enter(head))
	require.Nil(t, s.Enter(get))
	// 3 weigh 12: reads are shed too.
	assert.Equal(t, 2, s.Level())
	assert.NotNil(t, s.Enter(get))
	s.Exit(nil, 400*ms, true)

	// Fast requests bring the average down by 1/8 of the distance each.
	for range 30 {
		require.Nil(t, s.Enter(origin("POST", "/checkout", "")))
		s.Exit(nil, 10*ms, true)
	}
	assert.Less(t, s.Latency(), 100*time.Millisecond)
	assert.Equal(t, 0, s.Level(), "2 in flight weigh 2 again")
	assert.Nil(t, s.Enter(head))
	s.Exit(nil, 10*ms, true)

	// Without a target nothing is averaged.
	s.Apply(fourClasses(16))
	before := s.Latency()
	require.Nil(t, s.Enter(get))
	s.Exit(nil, 10_000*ms, true)
	assert.Equal(t, before, s.Latency())
}

// withTarget is cfg with a target latency of 100ms.
func withTarget(cfg config.Shedding) config.Shedding {
	cfg.TargetLatency = config.Duration(100 * time.Millisecond)
	return cfg
}

// TestShedPerClient: one client address holds at most max(1, max/4) of
// the requests in flight, whatever its requests' class; the others'
// requests are judged by the count as before, and a client's place is
// given back when its request ends. An IPv6 client is its /64.
func TestShedPerClient(t *testing.T) {
	for m, want := range map[int64]int64{0: 0, 2: 1, 3: 1, 8: 2, 20: 5, 512: 128} {
		assert.Equal(t, want, ShedPerClient(m), "max %d", m)
	}
	for m, want := range map[int64]int64{0: 0, 1: 1, 2: 1, 3: 1, 8: 3, 20: 9, 512: 255} {
		assert.Equal(t, want, ShedPerNetwork(m), "max %d", m)
	}
	var s Shedder
	s.Apply(fourClasses(20)) // 5 per client; test shed at 10, reads at 13, writes at 20
	from := func(ip string, method, path string) *Origin {
		o := origin(method, path, "")
		o.IP = netip.MustParseAddr(ip)
		return o
	}
	var held []*Origin
	for range 5 {
		o := from("192.0.2.7", "POST", "/checkout")
		require.Nil(t, s.Enter(o))
		held = append(held, o)
	}
	for _, o := range []*Origin{from("192.0.2.7", "POST", "/checkout"), from("::ffff:192.0.2.7", "GET", "/")} {
		c := s.Enter(o)
		require.NotNil(t, c, "beyond its share, even the highest class")
		assert.Equal(t, s.Policy().ClassOf(o).Name, c.Name)
	}
	assert.EqualValues(t, 2, s.ShedClient())
	assert.EqualValues(t, 5, s.InFlight())
	assert.Equal(t, 1, s.Clients())

	// Another client is served, and so is a v6 client's other /64.
	for _, ip := range []string{"192.0.2.8", "2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:3::1"} {
		o := from(ip, "HEAD", "/")
		require.Nil(t, s.Enter(o), ip)
		held = append(held, o)
	}
	for i := range 3 {
		o := from("2001:db8:1:2::"+strconv.Itoa(10+i), "POST", "/checkout")
		require.Nil(t, s.Enter(o), "a /64 holds 5: %d", i)
		held = append(held, o)
	}
	require.NotNil(t, s.Enter(from("2001:db8:1:2:ffff::1", "POST", "/checkout")), "the /64's sixth")

	// Ending a request gives its client's place back.
	s.Exit(held[0], 0, true)
	require.Nil(t, s.Enter(from("192.0.2.7", "POST", "/checkout")))
	for _, o := range held[1:] {
		s.Exit(o, 0, true)
	}
	s.Exit(from("192.0.2.7", "POST", "/checkout"), 0, true) // not entered: its client is not counted down
	assert.Equal(t, 1, s.Clients())

	// Many addresses of one network: together they hold its share
	// (20 / 2 - 1 = 9), an IPv4 /24's or an IPv6 /48's.
	for _, nw := range []string{"198.51.100.%d", "2001:db8:7:%d::1"} {
		var mine []*Origin
		for i := range 20 {
			if o := from(fmt.Sprintf(nw, i+1), "POST", "/checkout"); s.Enter(o) == nil {
				mine = append(mine, o)
			}
		}
		assert.Len(t, mine, 9, nw)
		other := from("198.51.101.1", "POST", "/checkout")
		require.Nil(t, s.Enter(other), "another network")
		for _, o := range append(mine, other) {
			s.Exit(o, 0, true)
		}
	}

	// Shedding off: no client is counted.
	var off Shedder
	off.Apply(config.Shedding{})
	for range 10 {
		require.Nil(t, off.Enter(from("192.0.2.7", "GET", "/")))
	}
	assert.Zero(t, off.Clients())
}

// TestPreReadBody: the start of a body is read before the request counts,
// and the handler reads the whole body as sent.
func TestPreReadBody(t *testing.T) {
	for _, n := range []int{0, 1, 100, 16 << 10, 100_000} {
		body := strings.Repeat("x", n)
		for _, chunked := range []bool{false, true} {
			r := httptest.NewRequest("POST", "/", strings.NewReader(body))
			if chunked {
				r.ContentLength = -1
				r.Body = io.NopCloser(iotest.OneByteReader(strings.NewReader(body)))
			}
			require.NoError(t, PreReadBody(r, PreReadBytes))
			b, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			assert.Equal(t, body, string(b), "%d bytes, chunked %v", n, chunked)
		}
	}
	r := httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(io.ErrUnexpectedEOF)))
	r.ContentLength = 10
	assert.ErrorIs(t, PreReadBody(r, PreReadBytes), io.ErrUnexpectedEOF)
	r = httptest.NewRequest("GET", "/", nil)
	require.NoError(t, PreReadBody(r, PreReadBytes))
	assert.Equal(t, http.NoBody, r.Body, "no body: untouched")
}
