package frontend

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/geolimit/geolimit/pop"
)

// One way into the pipeline. Every front end parses its protocol into
// checks (Classify for a request judged by the rules, Checks.Add for the
// API's named checks, ClassifyDescriptors for Envoy's descriptors), calls
// Env.Decide, and renders the Answer in its protocol; none decides,
// counts metrics or builds the RateLimit fields itself.
//
//	c := frontend.GetChecks(pop.All, false)
//	rules.Classify(&origin, c)
//	a := env.Decide(c, http.StatusTooManyRequests, nil)
//	defer a.Put()
//	a.Headers.Set(w.Header())
//	if !a.Allowed {
//		w.WriteHeader(a.Status)
//		w.Write(a.AppendDenied(nil))
//	}

// Field is one header field of an answer, in the order they are written.
type Field uint8

// The fields of an answer (Headers), in order.
const (
	FieldPolicy     Field = iota // RateLimit-Policy
	FieldRateLimit               // RateLimit
	FieldXLimit                  // X-RateLimit-Limit
	FieldXRemaining              // X-RateLimit-Remaining
	FieldXReset                  // X-RateLimit-Reset
	FieldRetryAfter              // Retry-After, of a denial
	FieldRepeat                  // Geolimit-Idempotent-Repeat: true, of a repeat
	NumFields                    // how many fields there are
)

// fieldNames are the fields' names, canonical (net/http) and lower case
// (HTTP/2, Envoy).
var fieldNames = [NumFields]struct{ canon, lower string }{
	{HPolicy, strings.ToLower(HPolicy)},
	{HRateLimit, strings.ToLower(HRateLimit)},
	{HXLimit, strings.ToLower(HXLimit)},
	{HXRemaining, strings.ToLower(HXRemaining)},
	{HXReset, strings.ToLower(HXReset)},
	{HRetryAfter, strings.ToLower(HRetryAfter)},
	{HRepeat, strings.ToLower(HRepeat)},
}

// Name is the field's canonical header name; Lower the same in lower case.
func (f Field) Name() string  { return fieldNames[f].canon }
func (f Field) Lower() string { return fieldNames[f].lower }

// Headers are an answer's header fields, in order (Field). The zero value
// has none. Read only: net/http may keep the values after the answer.
type Headers struct {
	v   *rlValues
	set uint8 // bit f: field f is set
}

// Has reports whether field f is set.
func (h Headers) Has(f Field) bool { return h.set&(1<<f) != 0 }

// Value is field f's value, "" when unset.
func (h Headers) Value(f Field) string {
	if !h.Has(f) {
		return ""
	}
	return h.v.vals[f]
}

// Set sets the fields on hdr, without allocating: the values are slices
// of one array.
func (h Headers) Set(hdr http.Header) {
	for f := range NumFields {
		if h.Has(f) {
			hdr[fieldNames[f].canon] = h.v.vals[f : f+1 : f+1]
		}
	}
}

// Answer is what the pipeline answers a request, for a front end to render
// in its protocol. Put returns its checks to the pool.
type Answer struct {
	// Status is the HTTP status of the answer: 200 when allowed, the deny
	// status when denied, 400 (404 for a rule a reload removed) when the
	// request could not be decided (Err or Msg say why; nothing was
	// counted).
	Status int
	// Allowed: the request may proceed.
	Allowed bool
	// Err is the pipeline's error for a strict request it refused
	// (a *pop.CheckError names the check); nil otherwise.
	Err error
	// Msg says why a request was refused before it was decided (a header
	// a rule keys on sent more than once).
	Msg string
	// Rule and Decision are the binding check's (pop.Outcome.Binding): what
	// the RateLimit fields and a denial's body speak of. Rule is nil when no
	// check of an enforce rule was decided.
	Rule     *Rule
	Decision pop.Decision
	// Repeat: the request repeats one decided for its idempotency key
	// (Checks.Repeat).
	Repeat bool
	// Full says why the request was denied when a concurrency check found
	// no room in the node's lease table (its key's slots may be free):
	// the answer is 503, whatever the deny status, and names the cap
	// (LeaseTableFullMsg). Empty otherwise.
	Full string
	// Headers are the binding decision's RateLimit fields and the repeat
	// field, in order.
	Headers Headers
	// Checks are the request's checks and each one's result (a batch's
	// answers, Envoy's statuses, a lease); Put gives them back.
	Checks *Checks
}

// Put returns the answer's checks to the pool; the answer must not be used
// after.
func (a *Answer) Put() {
	if a.Checks != nil {
		a.Checks.Put()
		a.Checks = nil
	}
}

// AppendDenied appends a denial's JSON body, as proxy mode, forward auth,
// the middleware and the SPOA answer it; nothing when no rule is binding.
func (a *Answer) AppendDenied(b []byte) []byte {
	if a.Rule == nil {
		return b
	}
	if a.Full != "" {
		return appendDenied(b, a.Full, true, a.Rule, a.Decision)
	}
	return AppendDenied(b, a.Rule, a.Decision)
}

// LeaseTableFullMsg says that the node's lease table is full, naming the
// cap: the error of a request denied for want of room in it (Answer.Full),
// on every front end.
func LeaseTableFullMsg(st pop.SlotStats) string {
	return "lease table full: " + strconv.Itoa(st.Leases) + " leases held on this node (limits.max_keys / 4 = " +
		strconv.Itoa(st.MaxLeases) + "); a lease comes back when released or at its rule's lease_ttl"
}

// Decide decides the checks of c through the node's pipeline
// (pop.Node.DecideChecks) at the clock's now, counts the decisions that
// stand in the rules' metrics and returns the answer, which owns c: a
// denial answers deny (429, forward_auth.deny_status), or 503 when the
// node's lease table had no room (Answer.Full); a request without checks
// is allowed and answers no RateLimit field. With held not nil, the
// leases of the concurrency checks of an allowed request go to held
// (Checks.Hold: the front end holds the request while it is in flight).
func (e *Env) Decide(c *Checks, deny int, held *Held) Answer {
	a := Answer{Checks: c}
	now := e.Clock.Now()
	if err := c.Decide(e.Node, now); err != nil {
		a.Err, a.Status = err, http.StatusBadRequest
		if errors.Is(err, pop.ErrUnknownRule) {
			a.Status = http.StatusNotFound
		}
		return a
	}
	c.Tally()
	if held != nil {
		held.take(c)
	}
	a.Allowed, a.Status = c.Out.Allowed, http.StatusOK
	if !a.Allowed {
		a.Status = deny
	}
	a.Rule, a.Decision = c.Binding()
	if !a.Allowed && a.Rule != nil && a.Rule.Pop.Kind == pop.Concurrency && a.Decision.Untracked {
		// Denied for want of room in the node's lease table, not by the
		// key's slots: the node is out of a resource, so 503, and say so.
		a.Status, a.Full = http.StatusServiceUnavailable, LeaseTableFullMsg(e.Node.SlotStats())
	}
	if a.Rule != nil {
		a.Headers = RateLimitHeaders(a.Rule, a.Decision, c.MoreAfter(e.Node, now), now)
	}
	if a.Repeat = c.Repeat(); a.Repeat {
		if a.Headers.v == nil {
			a.Headers.v = new(rlValues)
		}
		a.Headers.v.vals[FieldRepeat] = "true"
		a.Headers.set |= 1 << FieldRepeat
	}
	return a
}

// DecideOrigin classifies the request o against rs (Classify) and decides
// it all or nothing (Decide), for proxy mode, forward auth, the middleware
// and the SPOA alike. A request that sends a header a rule keys on more
// than once (o.Ambiguous) is answered 400 and counts nothing. With held
// not nil the concurrency rules that apply are checked too, and an
// allowed request's slots go to held, to be given back (Held.Release)
// when the request ends, however it ends.
func (e *Env) DecideOrigin(rs *Rules, o *Origin, deny int, held *Held) Answer {
	c := GetChecks(pop.All, false)
	c.Hold = held != nil
	rs.Classify(o, c)
	if o.Ambiguous != "" {
		return Answer{Status: http.StatusBadRequest, Msg: AmbiguousMsg(o.Ambiguous), Checks: c}
	}
	return e.Decide(c, deny, held)
}

// WriteHTTP writes the answer of a request judged by the rules (proxy
// mode, forward auth, the middleware) on w: the header fields always, and
// when the request may not go on, its 400 or denial; it reports whether the
// request may go on.
func (a *Answer) WriteHTTP(w http.ResponseWriter) bool {
	if a.Msg != "" {
		WriteError(w, a.Status, a.Msg)
		return false
	}
	a.Headers.Set(w.Header())
	if a.Allowed {
		return true
	}
	b := a.AppendDenied(make([]byte, 0, 192))
	w.Header()[HContentType] = JSONType
	w.WriteHeader(a.Status)
	_, _ = w.Write(b)
	return false
}
