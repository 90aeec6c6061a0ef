package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/geolimit/geolimit/pop"
)

// The classifier: one request (proxy mode, forward auth, the middleware)
// becomes checks, one per applicable rule, which the node's pipeline
// (pop.Node.DecideChecks) decides all or nothing. The Envoy descriptors
// (rls.go) and the API's checks (api.go) become checks the same way; no
// front end decides anything itself.

// checks is a request's classified checks, the rule of each and their
// results, pooled.
type checks struct {
	req   pop.Request
	rules []*compiledRule
	res   []pop.Result
	out   pop.Outcome
}

var checksPool = newPool(func() *checks { return &checks{} })

// reset empties c for a request of the given combination.
func (c *checks) reset(combine pop.Combine, strict bool) {
	clear(c.req.Checks) // no request's strings held in the pool
	c.req = pop.Request{Checks: c.req.Checks[:0], Combine: combine, Strict: strict}
	c.rules = c.rules[:0]
}

// add appends a check of rule cr.
func (c *checks) add(cr *compiledRule, key, tier string, cost uint64) {
	c.req.Checks = append(c.req.Checks, pop.Check{Rule: cr.h, Key: key, Tier: tier, Cost: cost})
	c.rules = append(c.rules, cr)
}

// decide runs the pipeline over the checks at now.
func (c *checks) decide(n *pop.Node, now int64) error {
	if cap(c.res) < len(c.req.Checks) {
		c.res = make([]pop.Result, len(c.req.Checks))
	}
	c.res = c.res[:len(c.req.Checks)]
	var err error
	c.out, err = n.DecideChecks(now, &c.req, c.res)
	return err
}

// tally counts in the rules' decision metrics the decisions that stand
// for the request (pop.Outcome.Stands).
func (c *checks) tally() {
	for i := range c.res {
		if c.out.Stands(c.res, i, c.req.Combine) {
			c.rules[i].m.record(c.res[i].Decision)
		}
	}
}

// binding returns the binding check's rule and decision; nil when no
// enforce rule applied.
func (c *checks) binding() (*compiledRule, pop.Decision) {
	if c.out.Binding < 0 {
		return nil, pop.Decision{}
	}
	return c.rules[c.out.Binding], c.res[c.out.Binding].Decision
}

// moreAfter is the RateLimit field's t for the binding check
// (pop.Node.MoreAfterHandle): an admitted request looks its key up once
// more.
func (c *checks) moreAfter(n *pop.Node, now int64) time.Duration {
	return c.moreAfterOf(n, now, c.out.Binding)
}

// moreAfterOf is moreAfter for check b.
func (c *checks) moreAfterOf(n *pop.Node, now int64, b int) time.Duration {
	ck := &c.req.Checks[b]
	return n.MoreAfterHandle(now, ck.Rule, ck.Key, c.res[b].Decision, pop.Options{Tier: ck.Tier})
}

// classify adds a check for every rule of rs that applies to o: it
// matches, and every part of its key is there. A request that sends a
// header a rule keys on more than once sets o.ambiguous; it is refused,
// and its checks are not decided.
func (rs *ruleSet) classify(o *origin, c *checks) {
	for _, cr := range rs.rules {
		if !cr.matches(o) {
			continue
		}
		k, ok := cr.key(o)
		if !ok {
			continue
		}
		c.add(cr, k, cr.tier(o), cr.pop.Cost)
	}
}

// decideOrigin classifies the request o against rs and decides it, all or
// nothing, for proxy mode, forward auth and the middleware alike. It
// returns the checks, with their outcome; the caller puts them back in
// checksPool. A request whose key headers are ambiguous (o.ambiguous)
// counts nothing.
func (a *App) decideOrigin(rs *ruleSet, o *origin) *checks {
	c := checksPool.get()
	c.reset(pop.All, false)
	rs.classify(o, c)
	if o.ambiguous != "" {
		c.out = pop.Outcome{Binding: -1}
		return c
	}
	if len(c.req.Checks) == 0 {
		c.out = pop.Outcome{Allowed: true, Binding: -1}
		return c
	}
	_ = c.decide(a.node, a.clk.Now()) // not strict: no error
	c.tally()
	return c
}

// answerOrigin decides o and writes what the front end answers when the
// request may not go on: 400 for ambiguous key headers, status when
// denied. It sets the binding rule's RateLimit headers on w either way and
// reports whether the request may go on.
func (a *App) answerOrigin(w http.ResponseWriter, rs *ruleSet, o *origin, status int, start time.Time, lat interface{ Observe(float64) }) bool {
	c := a.decideOrigin(rs, o)
	defer checksPool.put(c)
	lat.Observe(time.Since(start).Seconds())
	if o.ambiguous != "" {
		writeError(w, http.StatusBadRequest, ambiguousMsg(o.ambiguous))
		return false
	}
	cr, d := c.binding()
	if cr != nil {
		setRateLimitHeaders(w.Header(), cr, d, c.moreAfter(a.node, a.clk.Now()))
	}
	if !c.out.Allowed {
		writeDenied(w, status, cr, d)
		return false
	}
	return true
}

// tier returns the request's tier for the rule: the value of its tier
// header, when the request came through a trusted proxy and sends it
// exactly once; else empty, the rule's default tier. A client that reaches
// the listener directly never names its own tier.
func (cr *compiledRule) tier(o *origin) string {
	if cr.tierHeader == "" || !o.trusted {
		return ""
	}
	if vs := o.header[cr.tierHeader]; len(vs) == 1 {
		return vs[0]
	}
	return ""
}

// key builds the rule's key for o; ok is false when a part is missing (a
// header not sent), in which case the rule does not apply. A composite key
// is its parts joined by '|', each escaped (composeKey), so that two
// different part lists never give one key.
func (cr *compiledRule) key(o *origin) (string, bool) {
	if len(cr.parts) == 1 {
		k := partValue(cr.parts[0], o)
		if k == "" {
			return "", false
		}
		return boundKey(k), true
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
	return boundKey(composeKey(vals)), true
}

// composeKey joins the parts of a composite key: each part's '\' and '|'
// are escaped with a '\', and the parts are joined by '|'. Two different
// lists of parts never give one key; a part without either byte is kept as
// it is, so "acme|bob" is the key of ("acme", "bob") and
// "acme\|bob|x" that of ("acme|bob", "x").
func composeKey(parts []string) string {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		for j := 0; j < len(p); j++ {
			if c := p[j]; c == '|' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(p[j])
		}
	}
	return b.String()
}
