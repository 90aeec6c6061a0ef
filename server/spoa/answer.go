package spoa

import (
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/geolimit/geolimit/server/frontend"
)

// Variable names, under the SPOE configuration's var-prefix.
const (
	varAllowed    = "allowed"
	varStatus     = "status"
	varRetryAfter = "retry_after"
	varBody       = "body"
	varPolicy     = "ratelimit_policy"
	varRateLimit  = "ratelimit"
	varXLimit     = "x_ratelimit_limit"
	varXRemaining = "x_ratelimit_remaining"
	varXReset     = "x_ratelimit_reset"
	varError      = "error"
)

// headerVars pairs the RateLimit headers with their variables.
var headerVars = [...]struct{ header, name string }{
	{frontend.HPolicy, varPolicy},
	{frontend.HRateLimit, varRateLimit},
	{frontend.HXLimit, varXLimit},
	{frontend.HXRemaining, varXRemaining},
	{frontend.HXReset, varXReset},
	{frontend.HRetryAfter, varRetryAfter},
}

var headerPool = frontend.NewPool(func() *http.Header { h := make(http.Header, len(headerVars)); return &h })

// brief is what an answer must say when the whole of it does not fit the
// frame: whether the message was decided and allowed, its status, and the
// Retry-After of a denial. The RateLimit headers and the body are dropped.
type brief struct {
	decided, allowed bool
	status           int64
	retryAfter       string
}

// encode appends the brief answer's set-var actions to e.
func (b brief) encode(e *encoder) {
	if b.decided {
		allowed := int64(0)
		if b.allowed {
			allowed = 1
		}
		e.setVarInt(varAllowed, allowed)
	}
	if b.status != 0 {
		e.setVarInt(varStatus, b.status)
	}
	if b.retryAfter != "" {
		e.setVarString(varRetryAfter, b.retryAfter)
	}
}

// answer decides the message m, from a connection of HAProxy's at peer,
// appends its set-var actions to e, and returns its brief form. A message
// of another name, or whose arguments are wrong, is refused (status 400 and
// error) and counts nothing.
func (a *Agent) answer(e *encoder, m message, peer netip.Addr) brief {
	if string(m.name) != MessageName {
		a.refuse(e, "message "+strconv.Quote(string(m.name))+" unknown; this agent answers "+MessageName)
		return brief{status: http.StatusBadRequest}
	}
	start := time.Now()
	rs := a.env.Rules.Load()
	o, msg := originOf(m.args, peer.IsValid() && trusted(peer, rs.Trusted))
	if msg != "" {
		a.refuse(e, MessageName+": "+msg)
		return brief{status: http.StatusBadRequest}
	}
	c := a.env.DecideOrigin(rs, &o)
	defer c.Put()
	if o.Ambiguous != "" {
		a.cfg.Latency.Observe(time.Since(start).Seconds())
		e.setVarInt(varStatus, http.StatusBadRequest)
		e.setVarString(varError, frontend.AmbiguousMsg(o.Ambiguous))
		return brief{status: http.StatusBadRequest}
	}
	out := brief{decided: true, allowed: c.Out.Allowed}
	allowed := int64(0)
	if c.Out.Allowed {
		allowed = 1
	}
	e.setVarInt(varAllowed, allowed)
	cr, d := c.Binding()
	if cr != nil {
		hp := headerPool.Get()
		h := *hp
		now := a.env.Clock.Now()
		frontend.SetRateLimitHeaders(h, cr, d, c.MoreAfter(a.env.Node, now), now)
		for _, hv := range headerVars {
			if v := h[hv.header]; len(v) == 1 {
				e.setVarString(hv.name, v[0])
				if hv.name == varRetryAfter {
					out.retryAfter = v[0]
				}
			}
		}
		clear(h)
		headerPool.Put(hp)
	}
	if !c.Out.Allowed {
		out.status = int64(rs.DenyStatus)
		e.setVarInt(varStatus, int64(rs.DenyStatus))
		if cr != nil {
			b := frontend.GetBuf()
			*b = frontend.AppendDenied(*b, cr, d)
			e.setVarBytes(varBody, (*b)[:len(*b)-1]) // without the newline
			frontend.PutBuf(b)
		}
	}
	a.cfg.Latency.Observe(time.Since(start).Seconds())
	return out
}

// refuse answers a message that cannot be decided: status 400 and the
// reason. The first is logged: such a message is a mistake in HAProxy's
// configuration more often than a client's doing.
func (a *Agent) refuse(e *encoder, msg string) {
	e.setVarInt(varStatus, http.StatusBadRequest)
	e.setVarString(varError, msg)
	if a.warned.CompareAndSwap(false, true) {
		a.env.Log.Warn("spoa: a message was refused (status 400); check the SPOE configuration against the README (logged once)", "reason", msg)
	}
}

func trusted(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
