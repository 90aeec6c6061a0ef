package frontend

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/geolimit/geolimit/pop"
)

// Canonical header names (net/http canonical form) used on the hot path.
const (
	HContentType  = "Content-Type"
	HPolicy       = "Ratelimit-Policy"
	HRateLimit    = "Ratelimit"
	HXLimit       = "X-Ratelimit-Limit"
	HXRemaining   = "X-Ratelimit-Remaining"
	HXReset       = "X-Ratelimit-Reset"
	HRetryAfter   = "Retry-After"
	jsonMediaType = "application/json"
)

// JSONType is the Content-Type value of every JSON answer, shared: never
// modify it.
var JSONType = []string{jsonMediaType}

// WriteError answers status with {"error": msg}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	b := make([]byte, 0, 32+len(msg))
	b = append(b, `{"error":`...)
	b = AppendString(b, msg)
	b = append(b, "}\n"...)
	h := w.Header()
	h[HContentType] = JSONType
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, "encode: "+err.Error())
		return
	}
	w.Header()[HContentType] = JSONType
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// AppendResult appends one decision as the /v1/check response body;
// repeat adds "repeat":true (pop.Result.Repeat).
func AppendResult(b []byte, cr *Rule, key string, d pop.Decision, repeat bool) []byte {
	return append(AppendResultObj(b, cr, key, d, repeat), '\n')
}

// AppendResultObj appends one decision as a JSON object.
func AppendResultObj(b []byte, cr *Rule, key string, d pop.Decision, repeat bool) []byte {
	if d.Allowed {
		b = append(b, `{"allowed":true,"rule":`...)
	} else {
		b = append(b, `{"allowed":false,"rule":`...)
	}
	b = append(b, cr.ruleJSON...)
	b = append(b, `,"key":`...)
	b = AppendString(b, key)
	b = append(b, `,"limit":`...)
	b = appendLimit(b, cr, d)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendUint(b, d.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, CeilDiv(int64(d.Reset), int64(time.Millisecond)), 10)
	if d.RetryAfter <= 0 {
		b = append(b, `,"retry_after_ms":0`...)
	} else {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, CeilDiv(int64(d.RetryAfter), int64(time.Millisecond)), 10)
	}
	if cr.windowMS != nil && int(d.Binding) < len(cr.windowMS) {
		// A rule of several windows says which one the answer speaks of.
		b = append(b, `,"window_ms":`...)
		b = append(b, cr.windowMS[d.Binding]...)
	}
	if repeat {
		b = append(b, `,"repeat":true`...)
	}
	return append(AppendGuards(b, d), '}')
}

// appendLimit appends the binding window's limit for the request.
func appendLimit(b []byte, cr *Rule, d pop.Decision) []byte {
	if d.Limit == cr.Pop.Limit || d.Limit == 0 {
		return append(b, cr.limitStr...)
	}
	return strconv.AppendUint(b, d.Limit, 10)
}

// RateLimitHeaders returns RateLimit-Policy, RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11), X-RateLimit-Limit/Remaining/Reset
// and, when denied, Retry-After, from the binding rule's decision.
//
// t is in whole seconds, rounded up: more, the time until more quota is
// available (pop.Node.MoreAfter): when allowed, until the remaining grows by at
// least 1; when denied, until a request of the same cost fits (equal to
// Retry-After). X-RateLimit-Reset, also whole seconds, is the time until
// the whole limit is available again when allowed, and Retry-After when
// denied. now is the instant of the decision (Unix nanoseconds): a calendar
// rule's policy gives as w the length of the period that holds it.
func RateLimitHeaders(cr *Rule, d pop.Decision, more time.Duration, now int64) Headers {
	reset := CeilDiv(int64(d.Reset), int64(time.Second))
	t := CeilDiv(int64(more), int64(time.Second))
	if !d.Allowed {
		t = max(1, CeilDiv(int64(d.RetryAfter), int64(time.Second)))
		reset = t
	}
	// One allocation for all the values: they are cut from one buffer
	// beside them, X-RateLimit-Remaining from RateLimit's r. A value too
	// long for the buffer moves it to the heap: a second allocation.
	name := cr.names[0] // "name"
	if int(d.Binding) < len(cr.names) {
		name = cr.names[d.Binding]
	}
	hv := new(rlValues)
	vals := hv.vals[:]
	b := append(hv.buf[:0], name...)
	b = append(b, ";r="...)
	remStart := len(b)
	b = strconv.AppendUint(b, d.Remaining, 10)
	remEnd := len(b)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	rlEnd := len(b)
	b = strconv.AppendInt(b, reset, 10)
	resetEnd := len(b)
	if d.Limit != cr.Pop.Limit && d.Limit != 0 {
		b = strconv.AppendUint(b, d.Limit, 10)
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	vals[FieldPolicy], vals[FieldRateLimit], vals[FieldXLimit] = cr.policyAt(now), s[:rlEnd], cr.limitStr
	vals[FieldXRemaining], vals[FieldXReset] = s[remStart:remEnd], s[rlEnd:resetEnd]
	if resetEnd < len(s) {
		vals[FieldXLimit] = s[resetEnd:]
	}
	if d.Limits != nil {
		// An override or tier: the key's own limits.
		vals[FieldPolicy] = PolicyField(cr.Pop, d.Limits, now)
	}
	set := uint8(1<<FieldRetryAfter - 1)
	if !d.Allowed {
		vals[FieldRetryAfter] = vals[FieldXReset]
		set |= 1 << FieldRetryAfter
	}
	return Headers{v: hv, set: set}
}

// rlValues holds one answer's header values and the bytes they are cut
// from, so that both cost one allocation: net/http reads the values after
// the handler returns, so they cannot come from a pool. The bytes are
// never written once the values point into them.
type rlValues struct {
	vals [NumFields]string
	// buf holds the RateLimit field and the reset (and a limit of its
	// own): 64 bytes (160 in all, what two allocations took before) fit a
	// 40-byte policy name beside limits of up to 6 digits.
	buf [64]byte
}

// AmbiguousMsg is the 400 answer to a request that sends a header a rule
// keys on more than once.
func AmbiguousMsg(header string) string {
	return header + ": sent more than once; a rule keys on it, so one value is needed"
}

// AppendDenied appends the proxy's 429 body.
func AppendDenied(b []byte, cr *Rule, d pop.Decision) []byte {
	return appendDenied(b, "rate limited", false, cr, d)
}

// appendDenied appends a denial's body with the error msg; full adds
// "lease_table_full":true (Answer.Full).
func appendDenied(b []byte, msg string, full bool, cr *Rule, d pop.Decision) []byte {
	b = append(b, `{"error":`...)
	b = AppendString(b, msg)
	if full {
		b = append(b, `,"lease_table_full":true`...)
	}
	b = append(b, `,"rule":`...)
	b = AppendString(b, cr.Pop.Name)
	b = append(b, `,"limit":`...)
	b = strconv.AppendUint(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendUint(b, d.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, CeilDiv(int64(d.Reset), int64(time.Millisecond)), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, CeilDiv(int64(d.RetryAfter), int64(time.Millisecond)), 10)
	b = AppendGuards(b, d)
	if cr.windowMS != nil && int(d.Binding) < len(cr.windowMS) {
		b = append(b, `,"window_ms":`...)
		b = append(b, cr.windowMS[d.Binding]...)
	}
	return append(b, "}\n"...)
}

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// with encoding/json; <, > and & are escaped too.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// GetBuf returns a pooled buffer, empty; PutBuf takes it back.
func GetBuf() *[]byte { return bufPool.Get().(*[]byte) }

// PutBuf returns b to the pool (unless it grew past 1 MiB).
func PutBuf(b *[]byte) {
	if cap(*b) > 1<<20 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// Pool is a typed sync.Pool.
type Pool[T any] struct{ p sync.Pool }

// NewPool returns a Pool whose Get makes a new value with fn when empty.
func NewPool[T any](fn func() *T) *Pool[T] {
	return &Pool[T]{p: sync.Pool{New: func() any { return fn() }}}
}

// Get takes a value from the pool.
func (p *Pool[T]) Get() *T { return p.p.Get().(*T) }

// Put returns v to the pool.
func (p *Pool[T]) Put(v *T) { p.p.Put(v) }
