package frontend

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/config"
)

// Load shedding: a node-level gate in front of the rules, for the front
// ends that see a request until its response ends (proxy mode and the
// middleware). It counts the requests in flight on the node from when
// their work starts (their body read, PreReadBody) to the end of their
// response; past a class's threshold a request of that class is answered
// 503 at once, before it is classified into checks, so that no rule counts
// it. One client address (an IPv6 client's /64) holds at most
// ShedPolicy.PerClient of the requests in flight, and its network (an IPv4
// /24, an IPv6 /48) at most ShedPolicy.PerNetwork: a request beyond either
// is shed whatever its class, so that one client, with one address or
// many of one network, cannot push the others' classes over their
// thresholds. With a target latency
// the requests in flight weigh more while the requests that pass the rules
// take longer than the target on average. Forward auth, the
// decision API, the rate limit service and the HAProxy agent answer a
// question about a request that goes on elsewhere: they see no in-flight
// upstream work, and shed nothing.
//
//	if err := PreReadBody(r, PreReadBytes); err != nil {
//		return // the client did not send its body
//	}
//	if c := shed.Enter(&o); c != nil {
//		WriteShed(w, c) // 503, Retry-After
//		return
//	}
//	start, passed := clk.Now(), false
//	defer func() { shed.Exit(&o, clk.Now()-start, passed) }()

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

	// clients count the requests in flight of each client (ClientKey),
	// while shedding is on; a client leaves its shard's map when its
	// count is back to 0, so the maps hold only clients in flight.
	clients [clientShards]clientShard
	// networks count them of each client network (NetworkKey), the same
	// way.
	networks [clientShards]clientShard
	// shedClient counts the requests shed for their client's share, or
	// their network's.
	shedClient atomic.Uint64
}

const clientShards = 64

type clientShard struct {
	mu sync.Mutex
	n  map[[16]byte]int64
	_  [40]byte // one shard per cache line
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
	// PerClient is the most requests one client address (ClientKey) may
	// have in flight, ShedPerClient(Max); 0 when off.
	PerClient int64
	// PerNetwork is the most requests the client addresses of one network
	// (NetworkKey) may have in flight together, ShedPerNetwork(Max); 0
	// when off.
	PerNetwork int64
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

// ShedPerClient is the share of max_in_flight one client address may hold
// in flight: max(1, max/4), so that four clients at their share reach the
// threshold of the second class and one alone never passes the last
// class's (max/2). 0 when max is 0 (off).
func ShedPerClient(maxInFlight int64) int64 {
	if maxInFlight <= 0 {
		return 0
	}
	return max(1, maxInFlight/4)
}

// ShedPerNetwork is the share of max_in_flight the addresses of one
// network (NetworkKey) may hold in flight together: max(max/2 - 1,
// ShedPerClient(max)), so that one network alone, whatever number of
// addresses it uses, stays below the last class's threshold (max/2). 0
// when max is 0 (off).
func ShedPerNetwork(maxInFlight int64) int64 {
	if maxInFlight <= 0 {
		return 0
	}
	return max(maxInFlight/2-1, ShedPerClient(maxInFlight))
}

// NetworkKey is the key the requests in flight of a client's network are
// counted under: its IPv4 /24, its IPv6 /48 (one site's usual
// allocation).
func NetworkKey(ip netip.Addr) [16]byte {
	ip = ip.Unmap()
	bits := 48
	if ip.Is4() {
		bits = 24
	}
	p, _ := ip.Prefix(bits)
	return p.Addr().As16()
}

// ClientKey is the key a client's requests in flight are counted under:
// its address, an IPv6 one's /64 (one subscriber's usual allocation);
// invalid (not counted per client) when the address is unknown.
func ClientKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// Apply compiles a validated shedding section and makes it the current
// one. The requests in flight stay counted; counters of classes no longer
// named are forgotten.
func (s *Shedder) Apply(cfg config.Shedding) {
	p := &ShedPolicy{Max: int64(cfg.MaxInFlight), min: math.MaxInt64}
	if cfg.Enabled() {
		p.Target = int64(cfg.TargetLatency)
		p.PerClient, p.PerNetwork = ShedPerClient(p.Max), ShedPerNetwork(p.Max)
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
// when the request goes on: the caller must call Exit with the same o once
// its response has ended (with defer, so that a client abort or an
// upstream failure ends it too). It returns the request's class when the
// request is shed: the caller answers it (WriteShed) and does not call
// Exit. A request whose client already holds ShedPolicy.PerClient requests
// in flight is shed, whatever its class.
func (s *Shedder) Enter(o *Origin) *ShedClass {
	ahead := s.inFlight.Add(1) - 1
	p := s.pol.Load()
	if p == nil {
		return nil
	}
	if p.PerClient > 0 && o.IP.IsValid() {
		key, net := ClientKey(o.IP).As16(), NetworkKey(o.IP)
		if !s.enterClient(&s.clients, key, p.PerClient) {
			s.inFlight.Add(-1)
			s.shedClient.Add(1)
			return p.ClassOf(o)
		}
		if !s.enterClient(&s.networks, net, p.PerNetwork) {
			s.leaveClient(&s.clients, key)
			s.inFlight.Add(-1)
			s.shedClient.Add(1)
			return p.ClassOf(o)
		}
		o.shedKey, o.shedNet, o.shedCounted = key, net, true
	}
	load := p.Weigh(ahead, s.latency.Load())
	if load < p.min {
		return nil
	}
	c := p.ClassOf(o)
	if load < c.Threshold {
		return nil
	}
	s.exitClient(o)
	s.inFlight.Add(-1)
	c.Shed.Add(1)
	return c
}

func shardOf(shards *[clientShards]clientShard, key *[16]byte) *clientShard {
	h := uint32(2166136261) // FNV-1a over the bytes that differ: a v4 address's, a /64's last, a /48's
	for _, c := range key[4:8] {
		h = (h ^ uint32(c)) * 16777619
	}
	for _, c := range key[12:] {
		h = (h ^ uint32(c)) * 16777619
	}
	return &shards[h%clientShards]
}

// enterClient counts one more request of key in flight in shards (the
// clients' or the networks'), unless it holds limit already.
func (s *Shedder) enterClient(shards *[clientShards]clientShard, key [16]byte, limit int64) bool {
	sh := shardOf(shards, &key)
	sh.mu.Lock()
	n := sh.n[key]
	if n >= limit {
		sh.mu.Unlock()
		return false
	}
	if sh.n == nil {
		sh.n = make(map[[16]byte]int64)
	}
	sh.n[key] = n + 1
	sh.mu.Unlock()
	return true
}

// exitClient ends the request o counted for its client and its network by
// Enter, if any.
func (s *Shedder) exitClient(o *Origin) {
	if o == nil || !o.shedCounted {
		return
	}
	o.shedCounted = false
	s.leaveClient(&s.clients, o.shedKey)
	s.leaveClient(&s.networks, o.shedNet)
}

// leaveClient counts one request of key in shards out.
func (s *Shedder) leaveClient(shards *[clientShards]clientShard, key [16]byte) {
	sh := shardOf(shards, &key)
	sh.mu.Lock()
	if n := sh.n[key] - 1; n > 0 {
		sh.n[key] = n
	} else {
		delete(sh.n, key)
	}
	sh.mu.Unlock()
}

// ShedClient returns the number of requests shed because their client
// held its share of the requests in flight.
func (s *Shedder) ShedClient() uint64 { return s.shedClient.Load() }

// Clients returns the number of client addresses with requests in flight
// counted per client.
func (s *Shedder) Clients() int {
	n := 0
	for i := range s.clients {
		sh := &s.clients[i]
		sh.mu.Lock()
		n += len(sh.n)
		sh.mu.Unlock()
	}
	return n
}

// latencyWeight is the moving average's weight of the past: each request
// moves it by 1/latencyWeight of its distance to the request's duration.
const latencyWeight = 8

// Exit ends a request o that Enter let go on, after d nanoseconds; passed
// says whether it passed the rules. Only those are averaged: a denial's
// microseconds say nothing of the upstream. o may be nil for a request
// entered without a client address.
func (s *Shedder) Exit(o *Origin, d int64, passed bool) {
	s.exitClient(o)
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

// PreReadBytes is how much of a request's body the proxy and the
// middleware read before the request counts in flight.
const PreReadBytes = 16 << 10

// PreReadBody reads the start of r's body, up to n bytes (all of a smaller
// body), before the request's work starts, so that a client trickling its
// body holds no place among the requests in flight; r.Body then serves
// those bytes and the rest as before. A request without a body costs
// nothing. An error means the client did not send its body (it went away,
// or http.read_timeout passed): the request is over.
func PreReadBody(r *http.Request, n int) error {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	size := n
	if r.ContentLength > 0 && r.ContentLength < int64(n) {
		size = int(r.ContentLength)
	}
	// Grown as bytes arrive: a client that sends little costs little.
	buf := make([]byte, 0, min(size, 512))
	for len(buf) < size {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Body.Read(buf[len(buf):min(cap(buf), size)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			pb := &preReadBody{rest: http.NoBody, closer: r.Body}
			pb.r.Reset(buf)
			r.Body = pb
			return nil
		}
		if err != nil {
			return err
		}
	}
	pb := &preReadBody{rest: r.Body, closer: r.Body}
	pb.r.Reset(buf)
	r.Body = pb
	return nil
}

// preReadBody is a body whose start was read by PreReadBody.
type preReadBody struct {
	r      bytes.Reader
	rest   io.Reader
	closer io.Closer
}

func (b *preReadBody) Read(p []byte) (int, error) {
	if b.r.Len() > 0 {
		return b.r.Read(p)
	}
	return b.rest.Read(p)
}

func (b *preReadBody) Close() error { return b.closer.Close() }
