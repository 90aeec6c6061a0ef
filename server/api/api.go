// Package api is the HTTP decision API: POST /v1/check, POST /v1/checks,
// POST /v1/acquire and /v1/release (concurrency leases, acquire.go) and
// GET /v1/keys/{rule}/{key}. It parses JSON, turns each check into a
// check of the node's pipeline (one rule snapshot per request), and writes
// the answer; the daemon (package server) mounts it behind its bearer
// tokens, beside status, health and metrics.
//
//	h := api.New(env, api.Config{MaxBodyBytes: 1 << 20, MaxBatch: 1000})
//	mux.HandleFunc("/v1/check", h.ServeCheck)
package api

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
)

// Config configures a Handler.
type Config struct {
	// MaxBodyBytes caps a request body (limits.max_body_bytes).
	MaxBodyBytes int64
	// MaxBatch caps the checks of one POST /v1/checks (limits.max_batch).
	MaxBatch int
	// LatencyCheck observes a sample of POST /v1/check decisions (1 in 8),
	// LatencyChecks every POST /v1/checks; nil observes nothing.
	LatencyCheck, LatencyChecks prometheus.Observer
	// NoPrefetch turns off a batch's prefetch of keys a few checks ahead
	// (pop.Request.NoPrefetch), to measure what it gains.
	NoPrefetch bool
	// BeforeCount, when set, runs between the check and the counts of an
	// atomic batch (pop.Request.BeforeCount): tests race a request there.
	BeforeCount func()
}

// Handler serves the decision endpoints. Safe for concurrent use; its
// Config may be changed only before it serves.
type Handler struct {
	env frontend.Env
	Config
}

// New returns the handler of env's node and rules.
func New(env frontend.Env, cfg Config) *Handler {
	if cfg.LatencyCheck == nil {
		cfg.LatencyCheck = nopObserver{}
	}
	if cfg.LatencyChecks == nil {
		cfg.LatencyChecks = nopObserver{}
	}
	return &Handler{env: env, Config: cfg}
}

type nopObserver struct{}

func (nopObserver) Observe(float64) {}

// checkSample is the sampling rate of POST /v1/check latency observations.
const checkSample = 8

// apiError is a decision API failure: an HTTP status and a message.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errStatus(status int, msg string) *apiError { return &apiError{status: status, msg: msg} }

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	frontend.WriteError(w, http.StatusMethodNotAllowed, "method not allowed; use "+allow)
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
func (h *Handler) readRequest(w http.ResponseWriter, r *http.Request) (*[]byte, *apiError) {
	bp := frontend.GetBuf()
	b, err := readBody(w, r, h.MaxBodyBytes, *bp)
	*bp = b
	switch {
	case errors.Is(err, errTooLarge):
		return bp, errStatus(http.StatusRequestEntityTooLarge, "request body larger than "+strconv.FormatInt(h.MaxBodyBytes, 10)+" bytes")
	case err != nil:
		return bp, errStatus(http.StatusBadRequest, "read body: "+err.Error())
	}
	return bp, nil
}

// resolve validates a parsed check against the current rules: the rule, the
// key and the cost. Nothing is counted.
func resolve(rs *frontend.Rules, c *check) (*frontend.Rule, uint64, *apiError) {
	if len(c.rule) == 0 {
		return nil, 0, errStatus(http.StatusBadRequest, "rule: required")
	}
	cr := rs.ByName[string(c.rule)]
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
	case len(c.idem) > pop.MaxIdempotencyKeyLen:
		return nil, 0, errStatus(http.StatusBadRequest, "idempotency_key: longer than "+strconv.Itoa(pop.MaxIdempotencyKeyLen)+" bytes")
	}
	cost := cr.Pop.Cost
	if c.hasCost {
		cost = c.cost
	}
	if cost > cr.MaxCost {
		return nil, 0, errStatus(http.StatusBadRequest, "cost: "+strconv.FormatUint(cost, 10)+" exceeds the rule's limit "+cr.MaxCostStr)
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

// readCheck reads one check's body into c and resolves its rule, which
// must be of kind: on an error it writes the answer and returns ok false.
// The caller puts back bp (never nil) once the answer is written.
func (h *Handler) readCheck(w http.ResponseWriter, r *http.Request, c *check, kind pop.Kind) (bp *[]byte, cr *frontend.Rule, cost uint64, ok bool) {
	bp, aerr := h.readRequest(w, r)
	if aerr == nil {
		if err := parseCheckBody(*bp, c); err != nil {
			aerr = errStatus(http.StatusBadRequest, "bad JSON: "+err.Error())
		} else if cr, cost, aerr = resolve(h.env.Rules.Load(), c); aerr == nil && cr.Pop.Kind != kind {
			aerr = errStatus(http.StatusBadRequest, kindMsg(cr))
		}
	}
	if aerr != nil {
		frontend.WriteError(w, aerr.status, aerr.msg)
		return bp, nil, 0, false
	}
	return bp, cr, cost, true
}

// ServeCheck serves POST /v1/check {"rule":"api","key":"203.0.113.7","cost":1}.
// With "idempotency_key", a check already decided for that key is answered
// with the same decision, counts nothing, and says "repeat":true.
func (h *Handler) ServeCheck(w http.ResponseWriter, r *http.Request) {
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
	var c check
	bp, cr, cost, ok := h.readCheck(w, r, &c, pop.Rate)
	defer frontend.PutBuf(bp)
	if !ok {
		return
	}
	// The key is the body's bytes, without a copy: the pipeline keeps
	// nothing of it, and the body's buffer outlives the answer.
	key := unsafe.String(unsafe.SliceData(c.key), len(c.key))
	now := h.env.Clock.Now()
	ck := pop.Check{Rule: cr.Handle, Key: key, Tier: string(c.tier), Cost: cost, IdempotencyKey: bytesString(c.idem)}
	var res pop.Result
	if err := h.env.Node.DecideCheck(now, ck, &res); err != nil {
		e := decideErr(err)
		frontend.WriteError(w, e.status, e.msg)
		return
	}
	d := &res.Decision
	cr.Metrics.RecordResult(&res)
	frontend.SetRateLimitHeaders(w.Header(), cr, *d, h.env.Node.MoreAfterHandle(now, ck.Rule, key, *d, pop.Options{Tier: ck.Tier}), now)
	// The answer goes after the body in its buffer: key is the body's
	// bytes, and must not be written over before it is copied.
	b := *bp
	out := frontend.AppendResult(b[len(b):], cr, key, *d, res.Repeat)
	if cap(out) > cap(b) {
		*bp = out // grown: keep the larger buffer in the pool
	}
	w.Header()[frontend.HContentType] = frontend.JSONType
	if d.Allowed {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
	if sampled {
		h.LatencyCheck.Observe(time.Since(start).Seconds())
	}
}

// batchScratch holds a batch's parsed checks, pooled.
type batchScratch struct {
	checks []check
}

var batchPool = frontend.NewPool(func() *batchScratch { return &batchScratch{} })

// ServeChecks serves POST /v1/checks {"checks":[{"rule":..,"key":..,"cost":..},...],"atomic":false}
// -> {"results":[...]} (200; each result says allowed or not). Every check
// is validated before any is decided, so a bad check counts nothing. With
// "atomic": true all checks pass or none is counted (pop.Node.DecideChecks,
// all or nothing), and the answer adds "allowed" and "counted". A check
// may name an "idempotency_key" (see ServeCheck and pop.Node.DecideChecks
// for what a repeat means in an atomic batch).
func (h *Handler) ServeChecks(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	start := time.Now()
	bp, aerr := h.readRequest(w, r)
	defer frontend.PutBuf(bp)
	if aerr != nil {
		frontend.WriteError(w, aerr.status, aerr.msg)
		return
	}
	sc := batchPool.Get()
	defer batchPool.Put(sc)
	var err error
	var atomic bool
	sc.checks, atomic, err = parseChecksBody(*bp, sc.checks[:0], h.MaxBatch)
	if err != nil {
		if errors.Is(err, errTooMany) {
			frontend.WriteError(w, http.StatusRequestEntityTooLarge, "checks: more than "+strconv.Itoa(h.MaxBatch)+" in one batch")
			return
		}
		frontend.WriteError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	rs := h.env.Rules.Load()
	combine := pop.Each
	if atomic {
		combine = pop.All
	}
	cs := frontend.GetChecks(combine, true)
	defer cs.Put()
	cs.Req.NoPrefetch, cs.Req.BeforeCount = h.NoPrefetch, h.BeforeCount
	for i := range sc.checks {
		c := &sc.checks[i]
		cr, cost, aerr := resolve(rs, c)
		if aerr == nil && cr.Pop.Kind == pop.Concurrency {
			aerr = errStatus(http.StatusBadRequest, kindMsg(cr))
		}
		if aerr != nil {
			frontend.WriteError(w, aerr.status, checkMsg(i, aerr.msg))
			return
		}
		// The key is passed without a copy: the pipeline keeps nothing of
		// it, and the answer is written before the body's buffer is reused.
		cs.Add(cr, unsafe.String(unsafe.SliceData(c.key), len(c.key)), string(c.tier), cost)
		cs.Req.Checks[i].IdempotencyKey = bytesString(c.idem)
	}
	if err := cs.Decide(h.env.Node, h.env.Clock.Now()); err != nil {
		frontend.WriteError(w, http.StatusBadRequest, batchErrMsg(cs, err))
		return
	}
	out := frontend.GetBuf()
	defer frontend.PutBuf(out)
	b := (*out)[:0]
	if atomic {
		b = append(b, `{"allowed":`...)
		b = strconv.AppendBool(b, cs.Out.Allowed)
		b = append(b, `,"counted":`...)
		b = strconv.AppendInt(b, int64(cs.Out.Counted), 10)
		b = append(b, ',')
	} else {
		b = append(b, '{')
	}
	b = append(b, `"results":[`...)
	for i := range cs.Res {
		if i > 0 {
			b = append(b, ',')
		}
		b = frontend.AppendResultObj(b, cs.Rules[i], cs.Req.Checks[i].Key, cs.Res[i].Decision, cs.Res[i].Repeat)
	}
	b = append(b, "]}\n"...)
	*out = b
	cs.Tally()
	w.Header()[frontend.HContentType] = frontend.JSONType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	h.LatencyChecks.Observe(time.Since(start).Seconds())
}

// bytesString is b as a string without a copy: the pipeline keeps nothing
// of an idempotency key (it hashes it), and the body's buffer outlives the
// decision.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func checkMsg(i int, msg string) string { return "checks[" + strconv.Itoa(i) + "]: " + msg }

// batchErrMsg is the 400 answer to a batch the pipeline refused: checks of
// one rule and key of an atomic batch that cost together more than the
// rule can ever admit, or a rule removed by a reload meanwhile.
func batchErrMsg(cs *frontend.Checks, err error) string {
	var ce *pop.CheckError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	if errors.Is(err, pop.ErrSumOverLimit) {
		cr, key := cs.Rules[ce.Index], cs.Req.Checks[ce.Index].Key
		return checkMsg(ce.Index, "cost: the batch's checks of rule "+strconv.Quote(cr.Pop.Name)+
			" and key "+strconv.Quote(key)+" cost "+strconv.FormatUint(ce.Sum, 10)+" together, over the rule's limit "+
			cr.MaxCostStr+": an atomic batch could never pass")
	}
	return checkMsg(ce.Index, decideErr(err).msg)
}

// ServeKey serves GET /v1/keys/{rule}/{key...}: one key's view, counting
// nothing.
func (h *Handler) ServeKey(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	if h.serveInflightKey(w, r.PathValue("rule"), r.PathValue("key")) {
		return
	}
	v, err := h.env.Node.View(h.env.Clock.Now(), r.PathValue("rule"), r.PathValue("key"))
	switch {
	case errors.Is(err, pop.ErrUnknownRule):
		frontend.WriteError(w, http.StatusNotFound, "unknown rule "+strconv.Quote(r.PathValue("rule")))
		return
	case err != nil:
		frontend.WriteError(w, http.StatusBadRequest, "key: "+err.Error())
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
		frontend.BlockedUntilFields
	}{Rule: v.Rule, Key: v.Key, Limit: v.Limit, Estimate: v.Estimate, Windows: windows(v.Windows), BlockedUntilFields: frontend.BlockedUntil(v.BlockedUntil)}
	for _, m := range v.More {
		out.More = append(out.More, more{WindowMS: m.Window.Milliseconds(), Limit: m.Limit, Estimate: m.Estimate, Windows: windows(m.Windows)})
	}
	frontend.WriteJSON(w, http.StatusOK, out)
}
