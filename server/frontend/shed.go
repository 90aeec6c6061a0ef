package frontend

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/config"
)

// Load shedding: a node-level gate in front of the rules, for the front
// ends that see a request until its response ends (proxy mode and the
// middleware). It counts the requests in flight on the node; past a class's
// threshold a request of that class is answered 503 at once, before it is
// classified into checks, so that no rule counts it. With a target latency
// the requests in flight weigh more while the requests that pass the rules
// take longer than the target on average. Forward auth, the
// decision API, the rate limit service and the HAProxy agent answer a
// question about a request that goes on elsewhere: they see no in-flight
// upstream work, and shed nothing.
//
//	if c := shed.Enter(&o); c != nil {
//		WriteShed(w, c) // 503, Retry-After
//		return
//	}
//	start, passed := clk.Now(), false
//	defer func() { shed.Exit(clk.Now()-start, passed) }()

// Shedder is the node's load shedder: the count of requests in flight and
// the current classes (shedding.classes, swapped by Apply on reload without
// touching the count). The zero Shedder counts requests and sheds nothing.
// Safe for concurrent use.
type Shedder struct {
	inFlight atomic.Int64
	// latency is the moving average of the durations of the requests that
	// passed the rules, in nanoseconds (0: none yet); kept only while a
	// target latency is set.
	latency atomic.Int64
	pol     atomic.Pointer[ShedPolicy]

	mu sync.Mutex
	// shed are the classes' shed counters by name, kept across reloads
	// for as long as a class of that name exists.
	shed map[string]*atomic.Uint64
}

// ShedPolicy is a compiled shedding section. Read only once published.
type ShedPolicy struct {
	// Classes are the classes, highest priority first; empty when shedding
	// is off.
	Classes []ShedClass
	// Max is shedding.max_in_flight; 0 when off.
	Max int64
	// Target is shedding.target_latency in nanoseconds; 0 when off.
	Target int64
	// min is the least threshold: below it no class is shed, and a request
	// is not even classified.
	min int64
}

// ShedClass is one compiled priority class.
type ShedClass struct {
	Name string
	Matcher
	// Threshold is the number of requests in flight (the request itself not
	// counted) from which the class's requests are shed (ShedThreshold);
	// math.MaxInt64, never, for the first class.
	Threshold int64
	// Shed counts the class's shed requests.
	Shed *atomic.Uint64
	// retryAfter is the Retry-After value, shared: never modified.
	retryAfter []string
	// body is the 503's JSON body, shared: never modified.
	body []byte
}

// ShedThreshold is the number of requests in flight from which requests of
// class i of n (0 the highest priority) are shed, for max_in_flight max:
// never (math.MaxInt64) for class 0; max/2 for the last class; of three or
// more classes max for class 1 and the classes in between at even steps
// (rounded down). Of four classes and max 512: never, 512, 384, 256. Of
// two: never, 256.
func ShedThreshold(i, n int, max int64) int64 {
	if i <= 0 || i >= n || max <= 0 {
		return math.MaxInt64
	}
	steps := int64(n - 2) // between the last class and class 1
	if steps == 0 {
		return max / 2
	}
	up := int64(n - 1 - i) // steps above the last class
	return max * (steps + up) / (2 * steps)
}

// Apply compiles a validated shedding section and makes it the current
// one. The requests in flight stay counted; counters of classes no longer
// named are forgotten.
func (s *Shedder) Apply(cfg config.Shedding) {
	p := &ShedPolicy{Max: int64(cfg.MaxInFlight), min: math.MaxInt64}
	if cfg.Enabled() {
		p.Target = int64(cfg.TargetLatency)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]*atomic.Uint64, len(cfg.Classes))
	if cfg.Enabled() {
		secs := max(1, CeilDiv(int64(cfg.RetryAfter.D()), int64(time.Second)))
		ra := []string{strconv.FormatInt(secs, 10)}
		for i, c := range cfg.Classes {
			ctr := s.shed[c.Name]
			if ctr == nil {
				ctr = new(atomic.Uint64)
			}
			next[c.Name] = ctr
			sc := ShedClass{Name: c.Name, Matcher: NewMatcher(c.Match), Threshold: ShedThreshold(i, len(cfg.Classes), p.Max),
				Shed: ctr, retryAfter: ra}
			b := append([]byte(`{"error":"overloaded","shed":true,"class":`), AppendString(nil, c.Name)...)
			b = append(b, `,"retry_after_ms":`...)
			b = strconv.AppendInt(b, secs*1000, 10)
			sc.body = append(b, "}\n"...)
			p.min = min(p.min, sc.Threshold)
			p.Classes = append(p.Classes, sc)
		}
	}
	s.shed = next
	s.pol.Store(p)
}

// Policy returns the current policy; nil before the first Apply.
func (s *Shedder) Policy() *ShedPolicy { return s.pol.Load() }

// InFlight returns the number of requests in flight.
func (s *Shedder) InFlight() int64 { return s.inFlight.Load() }

// Enter counts the request o in flight, unless it is shed. It returns nil
// when the request goes on: the caller must call Exit once its response
// has ended (with defer, so that a client abort or an upstream failure
// ends it too). It returns the request's class when the request is shed:
// the caller answers it (WriteShed) and does not call Exit.
func (s *Shedder) Enter(o *Origin) *ShedClass {
	ahead := s.inFlight.Add(1) - 1
	p := s.pol.Load()
	if p == nil {
		return nil
	}
	load := p.Weigh(ahead, s.latency.Load())
	if load < p.min {
		return nil
	}
	c := p.ClassOf(o)
	if load < c.Threshold {
		return nil
	}
	s.inFlight.Add(-1)
	c.Shed.Add(1)
	return c
}

// latencyWeight is the moving average's weight of the past: each request
// moves it by 1/latencyWeight of its distance to the request's duration.
const latencyWeight = 8

// Exit ends a request that Enter let go on, after d nanoseconds; passed
// says whether it passed the rules. Only those are averaged: a denial's
// microseconds say nothing of the upstream.
func (s *Shedder) Exit(d int64, passed bool) {
	s.inFlight.Add(-1)
	if !passed {
		return
	}
	if p := s.pol.Load(); p == nil || p.Target == 0 {
		return
	}
	d = max(d, 0)
	// Load and store, not a compare-and-swap loop: two requests that end
	// together may lose one's sample, which an average can afford.
	e := s.latency.Load()
	if e == 0 {
		s.latency.Store(d)
		return
	}
	s.latency.Store(e + (d-e)/latencyWeight)
}

// Latency returns the moving average of the durations of the requests
// that passed the rules (0 without a target latency or before the first).
func (s *Shedder) Latency() time.Duration { return time.Duration(s.latency.Load()) }

// Level returns how many classes are shed now (ShedPolicy.Level of the
// requests in flight, weighed by the latency).
func (s *Shedder) Level() int {
	p := s.pol.Load()
	if p == nil {
		return 0
	}
	return p.Level(p.Weigh(s.inFlight.Load(), s.latency.Load()))
}

// Weigh returns the load that inFlight requests make against the
// thresholds while the requests take latency nanoseconds on average:
// inFlight, or, while latency is above the target, inFlight x latency /
// target (rounded down).
func (p *ShedPolicy) Weigh(inFlight, latency int64) int64 {
	if p.Target == 0 || latency <= p.Target || inFlight <= 0 {
		return inFlight
	}
	return int64(min(float64(inFlight)*float64(latency)/float64(p.Target), 1<<62)) // far above any threshold, far from overflow
}

// ClassOf returns the class of o: the first whose match o meets, else the
// last. p must have classes.
func (p *ShedPolicy) ClassOf(o *Origin) *ShedClass {
	last := len(p.Classes) - 1
	for i := 0; i < last; i++ {
		if p.Classes[i].Matches(o) {
			return &p.Classes[i]
		}
	}
	return &p.Classes[last]
}

// Level returns how many classes are shed with inFlight requests in
// flight (0 to len(Classes)-1).
func (p *ShedPolicy) Level(inFlight int64) int {
	n := 0
	for i := range p.Classes {
		if inFlight >= p.Classes[i].Threshold {
			n++
		}
	}
	return n
}

// WriteShed answers a request shed as one of class c: 503 with Retry-After
// (shedding.retry_after, in seconds) and a JSON body that names the class,
// {"error":"overloaded","shed":true,"class":"reads","retry_after_ms":1000}.
// No RateLimit fields: no rule denied it.
func WriteShed(w http.ResponseWriter, c *ShedClass) {
	h := w.Header()
	h[HContentType] = JSONType
	h[HRetryAfter] = c.retryAfter
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(c.body)
}
