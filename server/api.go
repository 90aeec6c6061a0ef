package server

import (
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// Canonical header names (net/http canonical form) used on the hot path.
const (
	hContentType  = "Content-Type"
	hPolicy       = "Ratelimit-Policy"
	hRateLimit    = "Ratelimit"
	hXLimit       = "X-Ratelimit-Limit"
	hXRemaining   = "X-Ratelimit-Remaining"
	hXReset       = "X-Ratelimit-Reset"
	hRetryAfter   = "Retry-After"
	jsonMediaType = "application/json"
)

var jsonCT = []string{jsonMediaType}

// checkSample is the sampling rate of POST /v1/check latency observations.
const checkSample = 8

func (a *App) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", a.handleCheck)
	mux.HandleFunc("/v1/checks", a.handleChecks)
	mux.HandleFunc("/v1/keys/{rule}/{key...}", a.handleKey)
	mux.HandleFunc("/v1/status", a.handleStatus)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !a.Ready() {
			status := "not ready"
			if a.ready.Load() {
				status = "syncing" // deciding, but former incarnations' counts may be missing
			}
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": status})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if au := a.auth.Load(); au != nil && !authOpen(r.URL.Path) {
			if why := au.check(r); why != authOK {
				a.unauthorized(w, why)
				return
			}
		}
		// The decision endpoints skip the mux.
		switch r.URL.Path {
		case "/v1/check":
			a.handleCheck(w, r)
		case "/v1/checks":
			a.handleChecks(w, r)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// apiError is a decision API failure: an HTTP status and a message.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errStatus(status int, msg string) *apiError { return &apiError{status: status, msg: msg} }

func writeError(w http.ResponseWriter, status int, msg string) {
	b := make([]byte, 0, 32+len(msg))
	b = append(b, `{"error":`...)
	b = appendString(b, msg)
	b = append(b, "}\n"...)
	h := w.Header()
	h[hContentType] = jsonCT
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode: "+err.Error())
		return
	}
	w.Header()[hContentType] = jsonCT
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method not allowed; use "+allow)
}

var errTooLarge = errors.New("request body too large")

// preallocMax is the most readBody allocates on a declared Content-Length
// before the bytes arrive: a larger body grows the buffer as it is read, so
// a client that declares a megabyte and stalls costs what it sent.
const preallocMax = 64 << 10

// readBody reads r's body into buf (reused), capped at max bytes. A body of
// known length is read exactly; a chunked one through http.MaxBytesReader.
func readBody(w http.ResponseWriter, r *http.Request, max int64, buf []byte) ([]byte, error) {
	if r.ContentLength > max {
		return buf, errTooLarge
	}
	if n := r.ContentLength; n >= 0 {
		if n <= preallocMax || int64(cap(buf)) >= n {
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			buf = buf[:n]
			if _, err := io.ReadFull(r.Body, buf); err != nil {
				return buf, err
			}
			return buf, nil
		}
		buf = buf[:0]
		for int64(len(buf)) < n {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			m, err := r.Body.Read(buf[len(buf):min(cap(buf), int(n))])
			buf = buf[:len(buf)+m]
			if err == io.EOF && int64(len(buf)) < n {
				return buf, io.ErrUnexpectedEOF
			}
			if err != nil && err != io.EOF {
				return buf, err
			}
		}
		return buf, nil
	}
	body := http.MaxBytesReader(w, r.Body, max)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return buf, errTooLarge
			}
			return buf, err
		}
	}
}

// readRequest reads the body into a pooled buffer; the caller puts it back.
func (a *App) readRequest(w http.ResponseWriter, r *http.Request) (*[]byte, *apiError) {
	bp := getBuf()
	b, err := readBody(w, r, a.cfg.Limits.MaxBodyBytes, *bp)
	*bp = b
	switch {
	case errors.Is(err, errTooLarge):
		return bp, errStatus(http.StatusRequestEntityTooLarge, "request body larger than "+strconv.FormatInt(a.cfg.Limits.MaxBodyBytes, 10)+" bytes")
	case err != nil:
		return bp, errStatus(http.StatusBadRequest, "read body: "+err.Error())
	}
	return bp, nil
}

// resolve validates a parsed check against the current rules: the rule, the
// key and the cost. Nothing is counted.
func resolve(rs *ruleSet, c *check) (*compiledRule, uint64, *apiError) {
	if len(c.rule) == 0 {
		return nil, 0, errStatus(http.StatusBadRequest, "rule: required")
	}
	cr := rs.byName[string(c.rule)]
	switch {
	case cr == nil:
		return nil, 0, errStatus(http.StatusNotFound, "unknown rule "+strconv.Quote(string(c.rule)))
	case len(c.key) == 0:
		return nil, 0, errStatus(http.StatusBadRequest, "key: must not be empty")
	case len(c.key) > crdt.MaxKeyLen:
		return nil, 0, errStatus(http.StatusBadRequest, "key: longer than "+strconv.Itoa(crdt.MaxKeyLen)+" bytes")
	case !utf8.Valid(c.key):
		// Two invalid keys would be counted apart but answered alike (as
		// U+FFFD), and JSON cannot carry them back.
		return nil, 0, errStatus(http.StatusBadRequest, "key: not valid UTF-8")
	case c.costErr:
		return nil, 0, errStatus(http.StatusBadRequest, "cost: must be a positive integer")
	}
	cost := cr.pop.Cost
	if c.hasCost {
		cost = c.cost
	}
	if cost > cr.maxCost {
		return nil, 0, errStatus(http.StatusBadRequest, "cost: "+strconv.FormatUint(cost, 10)+" exceeds the rule's limit "+cr.maxCostStr)
	}
	return cr, cost, nil
}

// decideErr maps a pipeline error (possible only when a reload races the
// request) to an API error.
func decideErr(err error) *apiError {
	var ce *pop.CheckError
	if errors.As(err, &ce) {
		err = ce.Err
	}
	switch {
	case errors.Is(err, pop.ErrUnknownRule):
		return errStatus(http.StatusNotFound, "unknown rule")
	default:
		return errStatus(http.StatusBadRequest, err.Error())
	}
}

// POST /v1/check {"rule":"api","key":"203.0.113.7","cost":1}
func (a *App) handleCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	// Latency is sampled (1 in checkSample): two clock reads and a shared
	// histogram update per request would cost more than the decision.
	var start time.Time
	sampled := rand.Uint32()%checkSample == 0
	if sampled {
		start = time.Now()
	}
	bp, aerr := a.readRequest(w, r)
	defer putBuf(bp)
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	var c check
	if err := parseCheckBody(*bp, &c); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	cr, cost, aerr := resolve(a.rules.Load(), &c)
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	// The key is the body's bytes, without a copy: the pipeline keeps
	// nothing of it, and the body's buffer outlives the answer.
	key := unsafe.String(unsafe.SliceData(c.key), len(c.key))
	now := a.clk.Now()
	cs := checksPool.get()
	defer checksPool.put(cs)
	cs.reset(pop.Each, true)
	cs.add(cr, key, string(c.tier), cost)
	if err := cs.decide(a.node, now); err != nil {
		e := decideErr(err)
		writeError(w, e.status, e.msg)
		return
	}
	cs.tally()
	d := cs.res[0].Decision
	setRateLimitHeaders(w.Header(), cr, d, cs.moreAfterOf(a.node, now, 0))
	out := appendResult((*bp)[:0], cr, key, d)
	*bp = out
	w.Header()[hContentType] = jsonCT
	if d.Allowed {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
	if sampled {
		a.met.latencyCheck.Observe(time.Since(start).Seconds())
	}
}

// batchScratch holds a batch's parsed checks and resolved rules, pooled.
type batchScratch struct {
	checks []check
	rules  []*compiledRule
	costs  []uint64
	counts []ruleCount
}

type ruleCount struct {
	m                             *ruleMetrics
	allowed, denied, shadowDenied uint64
}

var batchPool = newPool(func() *batchScratch { return &batchScratch{} })

// POST /v1/checks {"checks":[{"rule":..,"key":..,"cost":..},...],"atomic":false}
// -> {"results":[...]} (200; each result says allowed or not). Every check
// is validated before any is decided, so a bad check counts nothing. With
// "atomic": true all checks pass or none is counted (pop.Node.DecideChecks,
// all or nothing), and the answer adds "allowed" and "counted".
func (a *App) handleChecks(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	start := time.Now()
	bp, aerr := a.readRequest(w, r)
	defer putBuf(bp)
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	sc := batchPool.get()
	defer batchPool.put(sc)
	var err error
	var atomic bool
	sc.checks, atomic, err = parseChecksBody(*bp, sc.checks[:0], a.cfg.Limits.MaxBatch)
	if err != nil {
		if errors.Is(err, errTooMany) {
			writeError(w, http.StatusRequestEntityTooLarge, "checks: more than "+strconv.Itoa(a.cfg.Limits.MaxBatch)+" in one batch")
			return
		}
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	rs := a.rules.Load()
	cs := checksPool.get()
	defer checksPool.put(cs)
	combine := pop.Each
	if atomic {
		combine = pop.All
	}
	cs.reset(combine, true)
	cs.req.NoPrefetch, cs.req.BeforeCount = a.noPrefetch, a.testHookAtomic
	for i := range sc.checks {
		c := &sc.checks[i]
		cr, cost, aerr := resolve(rs, c)
		if aerr != nil {
			writeError(w, aerr.status, checkMsg(i, aerr.msg))
			return
		}
		// The key is passed without a copy: the pipeline keeps nothing of
		// it, and the answer is written before the body's buffer is reused.
		cs.add(cr, unsafe.String(unsafe.SliceData(c.key), len(c.key)), string(c.tier), cost)
	}
	if err := cs.decide(a.node, a.clk.Now()); err != nil {
		writeError(w, http.StatusBadRequest, batchErrMsg(cs, err))
		return
	}
	out := getBuf()
	defer putBuf(out)
	b := (*out)[:0]
	if atomic {
		b = append(b, `{"allowed":`...)
		b = strconv.AppendBool(b, cs.out.Allowed)
		b = append(b, `,"counted":`...)
		b = strconv.AppendInt(b, int64(cs.out.Counted), 10)
		b = append(b, ',')
	} else {
		b = append(b, '{')
	}
	b = append(b, `"results":[`...)
	sc.counts = sc.counts[:0]
	for i := range cs.res {
		if i > 0 {
			b = append(b, ',')
		}
		d := cs.res[i].Decision
		if cs.out.Stands(cs.res, i, combine) {
			sc.count(cs.rules[i].m, d)
		}
		b = appendResultObj(b, cs.rules[i], cs.req.Checks[i].Key, d)
	}
	b = append(b, "]}\n"...)
	*out = b
	a.flushCounts(sc)
	w.Header()[hContentType] = jsonCT
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	a.met.latencyChecks.Observe(time.Since(start).Seconds())
}

func checkMsg(i int, msg string) string { return "checks[" + strconv.Itoa(i) + "]: " + msg }

// batchErrMsg is the 400 answer to a batch the pipeline refused: checks of
// one rule and key of an atomic batch that cost together more than the
// rule can ever admit, or a rule removed by a reload meanwhile.
func batchErrMsg(cs *checks, err error) string {
	var ce *pop.CheckError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	if errors.Is(err, pop.ErrSumOverLimit) {
		cr, key := cs.rules[ce.Index], cs.req.Checks[ce.Index].Key
		return checkMsg(ce.Index, "cost: the batch's checks of rule "+strconv.Quote(cr.pop.Name)+
			" and key "+strconv.Quote(key)+" cost "+strconv.FormatUint(ce.Sum, 10)+" together, over the rule's limit "+
			cr.maxCostStr+": an atomic batch could never pass")
	}
	return checkMsg(ce.Index, decideErr(err).msg)
}

// count adds a decision to the batch's per-rule tallies (a batch touches few
// rules, so a short scan beats a map).
func (sc *batchScratch) count(m *ruleMetrics, d pop.Decision) {
	var rc *ruleCount
	for i := range sc.counts {
		if sc.counts[i].m == m {
			rc = &sc.counts[i]
			break
		}
	}
	if rc == nil {
		sc.counts = append(sc.counts, ruleCount{m: m})
		rc = &sc.counts[len(sc.counts)-1]
	}
	switch {
	case d.ShadowDenied:
		rc.shadowDenied++
	case d.Allowed:
		rc.allowed++
	default:
		rc.denied++
	}
	m.guards.record(d)
}

func (a *App) flushCounts(sc *batchScratch) {
	for _, rc := range sc.counts {
		if rc.allowed > 0 {
			rc.m.allowed.Add(rc.allowed)
		}
		if rc.denied > 0 {
			rc.m.denied.Add(rc.denied)
		}
		if rc.shadowDenied > 0 {
			rc.m.shadowDenied.Add(rc.shadowDenied)
		}
	}
	sc.counts = sc.counts[:0]
}

// appendResult appends one decision as the /v1/check response body.
func appendResult(b []byte, cr *compiledRule, key string, d pop.Decision) []byte {
	return append(appendResultObj(b, cr, key, d), '\n')
}

func appendResultObj(b []byte, cr *compiledRule, key string, d pop.Decision) []byte {
	if d.Allowed {
		b = append(b, `{"allowed":true,"rule":`...)
	} else {
		b = append(b, `{"allowed":false,"rule":`...)
	}
	b = append(b, cr.ruleJSON...)
	b = append(b, `,"key":`...)
	b = appendString(b, key)
	b = append(b, `,"limit":`...)
	b = appendLimit(b, cr, d)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendUint(b, d.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, ceilDiv(int64(d.Reset), int64(time.Millisecond)), 10)
	if d.RetryAfter <= 0 {
		b = append(b, `,"retry_after_ms":0`...)
	} else {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, ceilDiv(int64(d.RetryAfter), int64(time.Millisecond)), 10)
	}
	if cr.windowMS != nil && int(d.Binding) < len(cr.windowMS) {
		// A rule of several windows says which one the answer speaks of.
		b = append(b, `,"window_ms":`...)
		b = append(b, cr.windowMS[d.Binding]...)
	}
	return append(appendGuards(b, d), '}')
}

// appendLimit appends the binding window's limit for the request.
func appendLimit(b []byte, cr *compiledRule, d pop.Decision) []byte {
	if d.Limit == cr.pop.Limit || d.Limit == 0 {
		return append(b, cr.limitStr...)
	}
	return strconv.AppendUint(b, d.Limit, 10)
}

// setRateLimitHeaders sets RateLimit-Policy, RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11), X-RateLimit-Limit/Remaining/Reset
// and, when denied, Retry-After, from the binding rule's decision.
//
// t is in whole seconds, rounded up: more, the time until more quota is
// available (pop.Node.MoreAfter): when allowed, until the remaining grows by at
// least 1; when denied, until a request of the same cost fits (equal to
// Retry-After). X-RateLimit-Reset, also whole seconds, is the time until
// the whole limit is available again when allowed, and Retry-After when
// denied.
func setRateLimitHeaders(h http.Header, cr *compiledRule, d pop.Decision, more time.Duration) {
	reset := ceilDiv(int64(d.Reset), int64(time.Second))
	t := ceilDiv(int64(more), int64(time.Second))
	if !d.Allowed {
		t = max(1, ceilDiv(int64(d.RetryAfter), int64(time.Second)))
		reset = t
	}
	// One allocation for all the values: build them in one buffer and slice.
	var rem, tb [20]byte
	r := strconv.AppendUint(rem[:0], d.Remaining, 10)
	ts := strconv.AppendInt(tb[:0], t, 10)
	var arr [160]byte
	name := cr.names[0] // "name"
	if int(d.Binding) < len(cr.names) {
		name = cr.names[d.Binding]
	}
	b := append(arr[:0], name...)
	b = append(b, ";r="...)
	b = append(b, r...)
	b = append(b, ";t="...)
	b = append(b, ts...)
	rlEnd := len(b)
	b = append(b, r...)
	remEnd := len(b)
	b = strconv.AppendInt(b, reset, 10)
	limEnd := len(b)
	if d.Limit != cr.pop.Limit && d.Limit != 0 {
		b = strconv.AppendUint(b, d.Limit, 10)
	}
	s := string(b)
	vals := make([]string, 6)
	vals[0], vals[1], vals[2] = cr.policy, s[:rlEnd], cr.limitStr
	vals[3], vals[4] = s[rlEnd:remEnd], s[remEnd:limEnd]
	if limEnd < len(s) {
		vals[2] = s[limEnd:]
	}
	if d.Limits != nil {
		// An override or tier: the key's own limits.
		vals[0] = policyField(cr.pop, d.Limits)
	}
	h[hPolicy] = vals[0:1:1]
	h[hRateLimit] = vals[1:2:2]
	h[hXLimit] = vals[2:3:3]
	h[hXRemaining] = vals[3:4:4]
	h[hXReset] = vals[4:5:5]
	if !d.Allowed {
		vals[5] = vals[4]
		h[hRetryAfter] = vals[5:6:6]
	}
}

// GET /v1/keys/{rule}/{key...}: one key's view, counting nothing.
func (a *App) handleKey(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	v, err := a.node.View(a.clk.Now(), r.PathValue("rule"), r.PathValue("key"))
	switch {
	case errors.Is(err, pop.ErrUnknownRule):
		writeError(w, http.StatusNotFound, "unknown rule "+strconv.Quote(r.PathValue("rule")))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "key: "+err.Error())
		return
	}
	type window struct {
		Index    int64             `json:"index"`
		Total    uint64            `json:"total"`
		Replicas map[string]uint64 `json:"replicas"`
	}
	windows := func(ws []crdt.WindowView) []window {
		out := []window{}
		for _, wv := range ws {
			reps := wv.Replicas
			if reps == nil {
				reps = map[string]uint64{}
			}
			out = append(out, window{Index: wv.Index, Total: wv.Total, Replicas: reps})
		}
		return out
	}
	type more struct {
		WindowMS int64    `json:"window_ms"`
		Limit    uint64   `json:"limit"`
		Estimate float64  `json:"estimate"`
		Windows  []window `json:"windows"`
	}
	out := struct {
		Rule     string   `json:"rule"`
		Key      string   `json:"key"`
		Limit    uint64   `json:"limit"`
		Estimate float64  `json:"estimate"`
		Windows  []window `json:"windows"`
		// More are a rule's further windows (a rule of several).
		More []more `json:"more_windows,omitempty"`
		blockedUntilFields
	}{Rule: v.Rule, Key: v.Key, Limit: v.Limit, Estimate: v.Estimate, Windows: windows(v.Windows), blockedUntilFields: blockedUntil(v.BlockedUntil)}
	for _, m := range v.More {
		out.More = append(out.More, more{WindowMS: m.Window.Milliseconds(), Limit: m.Limit, Estimate: m.Estimate, Windows: windows(m.Windows)})
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /v1/status
func (a *App) handleStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	self := a.opts.Self
	st := a.node.Stats()
	type limitOut struct {
		Limit  uint64 `json:"limit"`
		Window string `json:"window"`
	}
	type ruleOut struct {
		Name        string `json:"name"`
		Limit       uint64 `json:"limit"`
		Window      string `json:"window"`
		Cost        uint64 `json:"cost"`
		Scope       string `json:"scope"`
		Mode        string `json:"mode"`
		OnPartition string `json:"on_partition"`
		Keys        int    `json:"keys"`
		// Of a rule of several windows, every window (the first is
		// limit and window); overrides and tiers when set.
		Limits      []limitOut `json:"limits,omitempty"`
		Overrides   int        `json:"overrides,omitempty"`
		Tiers       []string   `json:"tiers,omitempty"`
		DefaultTier string     `json:"default_tier,omitempty"`
	}
	rules := []ruleOut{}
	for _, cr := range a.rules.Load().rules {
		p := cr.pop
		ro := ruleOut{Name: p.Name, Limit: p.Limit, Window: p.Window.String(), Cost: p.Cost,
			Scope: p.Scope.String(), Mode: p.Mode.String(), OnPartition: p.OnPartition.String(), Keys: st.KeysByRule[p.Name],
			Overrides: len(p.Overrides), DefaultTier: p.DefaultTier}
		if len(p.More) > 0 {
			for _, l := range p.Windows() {
				ro.Limits = append(ro.Limits, limitOut{Limit: l.Limit, Window: l.Window.String()})
			}
		}
		for name := range p.Tiers {
			ro.Tiers = append(ro.Tiers, name)
		}
		slices.Sort(ro.Tiers)
		rules = append(rules, ro)
	}
	repl := ReplicationStatus{
		Members:    []Member{{Name: self.Node, State: "alive"}},
		RemotePoPs: []RemotePoP{},
		Partitions: []string{},
	}
	if a.repl != nil {
		repl = a.repl.Status()
		if repl.Members == nil {
			repl.Members = []Member{}
		}
		if repl.RemotePoPs == nil {
			repl.RemotePoPs = []RemotePoP{}
		}
		if repl.Partitions == nil {
			repl.Partitions = []string{}
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Replica     string              `json:"replica"`
		Node        string              `json:"node"`
		Region      string              `json:"region"`
		PoP         string              `json:"pop"`
		Incarnation uint64              `json:"incarnation"`
		Version     string              `json:"version"`
		GoVersion   string              `json:"go_version"`
		UptimeS     int64               `json:"uptime_seconds"`
		Ready       bool                `json:"ready"`
		Synced      bool                `json:"synced"`
		NATSURL     string              `json:"nats_url"`
		Replication bool                `json:"replication"`
		Keys        int                 `json:"keys"`
		Rules       []ruleOut           `json:"rules"`
		Partition   pop.PartitionStatus `json:"partition"`
		ReplicationStatus
	}{
		Replica: self.String(), Node: self.Node, Region: self.Region, PoP: self.PoP, Incarnation: self.Incarnation,
		Version: a.opts.Version, GoVersion: runtime.Version(), UptimeS: int64(time.Since(a.started).Seconds()),
		Ready: a.Ready(), Synced: a.node.Synced(), NATSURL: a.natsURL, Replication: a.repl != nil, Keys: st.Store.Keys, Rules: rules,
		Partition:         a.node.Partition(a.clk.Now()),
		ReplicationStatus: repl,
	})
}
