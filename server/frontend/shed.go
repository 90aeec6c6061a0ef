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
// classified into checks, so that no rule counts it. Forward auth, the
// decision API, the rate limit service and the HAProxy agent answer a
// question about a request that goes on elsewhere: they see no in-flight
// upstream work, and shed nothing.
//
//	if c := shed.Enter(&o); c != nil {
//		WriteShed(w, c) // 503, Retry-After
//		return
//	}
//	defer shed.Exit()

// Shedder is the node's load shedder: the count of requests in flight and
// the current classes (shedding.classes, swapped by Apply on reload without
// touching the count). The zero Shedder counts requests and sheds nothing.
// Safe for concurrent use.
type Shedder struct {
	inFlight atomic.Int64
	pol      atomic.Pointer[ShedPolicy]

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
	if p == nil || ahead < p.min {
		return nil
	}
	c := p.ClassOf(o)
	if ahead < c.Threshold {
		return nil
	}
	s.inFlight.Add(-1)
	c.Shed.Add(1)
	return c
}

// Exit ends a request that Enter let go on.
func (s *Shedder) Exit() { s.inFlight.Add(-1) }

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
