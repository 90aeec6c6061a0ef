// Package frontend is what every front end of the daemon shares: the
// compiled rule snapshot (Rules), the classifiers that turn a request into
// checks (Classify for a request the rules judge, ClassifyDescriptor for
// Envoy's descriptors, Checks.Add for the API's named checks), the one key
// rule that names every counter (Key), and the one way into the node's
// pipeline, Env.Decide, whose Answer (allowed, status, the header fields in
// order, the binding check, the repeat, the denial's body) each front end
// renders in its protocol. A front end (the HTTP API, proxy mode and
// forward auth, the middleware, the Envoy rate limit service, the HAProxy
// agent) parses and renders; none decides anything itself.
//
//	a := env.DecideOrigin(rules, &origin, http.StatusTooManyRequests, nil)
//	defer a.Put()
//	if a.WriteHTTP(w) { // the header fields, or the 400 or denial
//		next.ServeHTTP(w, r)
//	}
package frontend

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/pop"
)

// Env is what a front end needs of the daemon: the node core, the clock,
// the current rule snapshot and a logger. Its fields are set once, before
// the front end serves.
type Env struct {
	Node  *pop.Node
	Clock clock.Clock
	// Rules holds the current snapshot; a reload swaps it.
	Rules *atomic.Pointer[Rules]
	Log   *slog.Logger
	// Shed is the node's load shedder (shed.go), for proxy mode and the
	// middleware; nil sheds and counts nothing.
	Shed *Shedder
}

// Checks is a request's classified checks, the rule of each and their
// results, pooled (GetChecks, Put). Not safe for concurrent use.
type Checks struct {
	Req   pop.Request
	Rules []*Rule
	Res   []pop.Result
	Out   pop.Outcome
	// Hold: the front end holds the request while it is in flight (proxy
	// mode, the middleware), so Classify adds the concurrency rules'
	// checks too, pinned: their leases are given back when the request
	// ends (hold.go). Other front ends answer before the request is done
	// and skip concurrency rules.
	Hold bool
}

var checksPool = NewPool(func() *Checks { return &Checks{} })

// GetChecks returns empty Checks for a request of the given combination
// (strict: see pop.Request.Strict).
func GetChecks(combine pop.Combine, strict bool) *Checks {
	c := checksPool.Get()
	clear(c.Req.Checks) // no former request's strings held
	c.Req = pop.Request{Checks: c.Req.Checks[:0], Combine: combine, Strict: strict}
	c.Rules = c.Rules[:0]
	c.Res = c.Res[:0]
	c.Out = pop.Outcome{Binding: -1}
	c.Hold = false
	return c
}

// Put returns c to the pool; c must not be used after.
func (c *Checks) Put() { checksPool.Put(c) }

// Add appends a check of rule cr for the value v, a request's key as it
// names it (or the composition of its parts, ComposeKey): the check's key
// is Key(v), and its idempotency key IdempotencyKey(idem), none when idem
// is empty. Every front end adds its checks here, so that one value is
// one key whichever front end carries it. It returns the check, for its
// Probe and Pin.
func (c *Checks) Add(cr *Rule, v, tier, idem string, cost uint64) *pop.Check {
	if idem != "" {
		idem = IdempotencyKey(idem)
	}
	c.Req.Checks = append(c.Req.Checks, pop.Check{Rule: cr.Handle, Key: Key(v), Tier: tier, Cost: cost, IdempotencyKey: idem})
	c.Rules = append(c.Rules, cr)
	return &c.Req.Checks[len(c.Req.Checks)-1]
}

// Decide runs the pipeline over the checks at now. A request without
// checks is allowed, with no binding check.
func (c *Checks) Decide(n *pop.Node, now int64) error {
	if len(c.Req.Checks) == 0 {
		c.Res, c.Out = c.Res[:0], pop.Outcome{Allowed: true, Binding: -1}
		return nil
	}
	if cap(c.Res) < len(c.Req.Checks) {
		c.Res = make([]pop.Result, len(c.Req.Checks))
	}
	c.Res = c.Res[:len(c.Req.Checks)]
	var err error
	c.Out, err = n.DecideChecks(now, &c.Req, c.Res)
	return err
}

// Stands reports whether check i's decision stands for the request
// (pop.Outcome.Stands): what the decision metrics count.
func (c *Checks) Stands(i int) bool { return c.Out.Stands(c.Res, i, c.Req.Combine) }

// Tally counts in the rules' decision metrics the decisions that stand:
// summed per rule first, so that a batch of many checks adds to each
// rule's counters once.
func (c *Checks) Tally() {
	if len(c.Res) == 1 {
		if c.Stands(0) {
			c.Rules[0].Metrics.RecordResult(&c.Res[0])
		}
		return
	}
	type sum struct {
		m                                      *RuleMetrics
		allowed, denied, shadowDenied, repeats uint64
		off                                    uint64 // admitted unchecked: the rule is off
	}
	var buf [8]sum
	sums := buf[:0]
	for i := range c.Res {
		if !c.Stands(i) {
			continue
		}
		d := &c.Res[i].Decision
		m := c.Rules[i].Metrics
		var s *sum
		for j := range sums { // a request touches few rules: a scan beats a map
			if sums[j].m == m {
				s = &sums[j]
				break
			}
		}
		if s == nil {
			sums = append(sums, sum{m: m})
			s = &sums[len(sums)-1]
		}
		if c.Res[i].Repeat {
			s.repeats++
		}
		switch {
		case d.Off:
			s.off++
		case d.ShadowDenied:
			s.shadowDenied++
		case d.Allowed:
			s.allowed++
		default:
			s.denied++
		}
		m.Guards.Record(*d)
	}
	for _, s := range sums {
		if s.allowed > 0 {
			s.m.Allowed.Add(s.allowed)
		}
		if s.denied > 0 {
			s.m.Denied.Add(s.denied)
		}
		if s.shadowDenied > 0 {
			s.m.ShadowDenied.Add(s.shadowDenied)
		}
		if s.off > 0 {
			s.m.Off.Add(s.off)
		}
		if s.repeats > 0 {
			s.m.Repeats.Add(s.repeats)
		}
	}
}

// Binding returns the binding check's rule and decision; nil when no
// enforce rule applied.
func (c *Checks) Binding() (*Rule, pop.Decision) {
	if c.Out.Binding < 0 {
		return nil, pop.Decision{}
	}
	return c.Rules[c.Out.Binding], c.Res[c.Out.Binding].Decision
}

// MoreAfter is the RateLimit field's t for the binding check
// (pop.Node.MoreAfter): an admitted request looks its key up once
// more.
func (c *Checks) MoreAfter(n *pop.Node, now int64) time.Duration {
	ck := &c.Req.Checks[c.Out.Binding]
	return n.MoreAfter(now, ck.Rule, ck.Key, c.Res[c.Out.Binding].Decision, pop.Options{Tier: ck.Tier})
}

// Classify adds a check for every rule of rs that applies to o: it
// matches, and every part of its key is there. Every check carries the
// request's idempotency key (IdempotencyKey), if it names one. A request
// that sends a header a rule keys on, or the idempotency header, more than
// once sets o.Ambiguous; it must be refused, and its checks not decided.
func (rs *Rules) Classify(o *Origin, c *Checks) {
	idem := rs.IdempotencyValue(o)
	for _, cr := range rs.List {
		if !cr.Matches(o) {
			continue
		}
		conc := cr.Pop.Kind == pop.Concurrency
		if conc && !c.Hold {
			continue
		}
		v, ok := cr.value(o)
		if !ok {
			continue
		}
		c.Add(cr, v, cr.tier(o), idem, cr.Pop.Cost).Pin = conc
	}
}

// IdempotencyValue returns the value of o's idempotency header, empty when
// it is not sent or none is configured. Sent more than once, it sets
// o.Ambiguous.
func (rs *Rules) IdempotencyValue(o *Origin) string {
	if rs.IdemHeader == "" {
		return ""
	}
	vs := o.Header[rs.IdemHeader]
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	o.Ambiguous = rs.IdemHeader
	return ""
}

// HRepeat is the header proxy mode and forward auth add to the answer of a
// request that repeats one decided for its idempotency key.
const HRepeat = "Geolimit-Idempotent-Repeat"

// Repeat reports whether the request is a repeat: it has checks that
// name an idempotency key, and every one decided is a repeat.
func (c *Checks) Repeat() bool {
	some := false
	for i := range c.Res {
		if c.Res[i].Err != nil || c.Req.Checks[i].IdempotencyKey == "" || c.Req.Checks[i].Probe {
			continue
		}
		if !c.Res[i].Repeat {
			return false
		}
		some = true
	}
	return some
}

// tier returns the request's tier for the rule: the value of its tier
// header, when the request came through a trusted proxy and sends it
// exactly once; else empty, the rule's default tier. A client that reaches
// the listener directly never names its own tier.
func (cr *Rule) tier(o *Origin) string {
	if cr.tierHeader == "" || !o.Trusted {
		return ""
	}
	if vs := o.Header[cr.tierHeader]; len(vs) == 1 {
		return vs[0]
	}
	return ""
}

// value is the value of the rule's key for o, as Checks.Add takes it; ok
// is false when a part is missing (a header not sent), in which case the
// rule does not apply. A composite key is its parts joined by '|', each
// escaped (ComposeKey), so that two different part lists never give one
// key.
func (cr *Rule) value(o *Origin) (string, bool) {
	if len(cr.parts) == 1 {
		k := partValue(cr.parts[0], o)
		return k, k != ""
	}
	var buf [8]string
	vals := buf[:0]
	for _, p := range cr.parts {
		v := partValue(p, o)
		if v == "" {
			return "", false
		}
		vals = append(vals, v)
	}
	return ComposeKey(vals), true
}
