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
	varRepeat     = "repeat"
)

// fieldVars are the variables of the answer's header fields
// (frontend.Field), in order.
var fieldVars = [...]string{
	frontend.FieldPolicy:     varPolicy,
	frontend.FieldRateLimit:  varRateLimit,
	frontend.FieldXLimit:     varXLimit,
	frontend.FieldXRemaining: varXRemaining,
	frontend.FieldXReset:     varXReset,
	frontend.FieldRetryAfter: varRetryAfter,
	frontend.FieldRepeat:     varRepeat,
}

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
	o, msg := originOf(m.args, peer.IsValid() && frontend.IsTrusted(peer, rs.Trusted))
	if msg != "" {
		a.refuse(e, MessageName+": "+msg)
		return brief{status: http.StatusBadRequest}
	}
	ans := a.env.DecideOrigin(rs, &o, rs.DenyStatus, nil)
	defer ans.Put()
	a.cfg.Latency.Observe(time.Since(start).Seconds())
	return render(e, &ans)
}

// render appends the answer's set-var actions to e and returns its brief
// form: a pure rendering of what the pipeline answered.
func render(e *encoder, ans *frontend.Answer) brief {
	if ans.Msg != "" {
		e.setVarInt(varStatus, int64(ans.Status))
		e.setVarString(varError, ans.Msg)
		return brief{status: int64(ans.Status)}
	}
	out := brief{decided: true, allowed: ans.Allowed}
	allowed := int64(0)
	if ans.Allowed {
		allowed = 1
	}
	e.setVarInt(varAllowed, allowed)
	for f, name := range fieldVars {
		switch f := frontend.Field(f); {
		case !ans.Headers.Has(f):
		case f == frontend.FieldRepeat:
			e.setVarInt(name, 1)
		default:
			e.setVarString(name, ans.Headers.Value(f))
		}
	}
	out.retryAfter = ans.Headers.Value(frontend.FieldRetryAfter)
	if !ans.Allowed {
		out.status = int64(ans.Status)
		e.setVarInt(varStatus, out.status)
		if ans.Rule != nil {
			b := frontend.GetBuf()
			*b = ans.AppendDenied(*b)
			e.setVarBytes(varBody, (*b)[:len(*b)-1]) // without the newline
			frontend.PutBuf(b)
		}
	}
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
