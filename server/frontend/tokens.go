package frontend

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/config"
)

// Tokens holds the API's bearer tokens (api.token_file). An App without
// tokens has a nil *Tokens, and its handler pays one nil check.
type Tokens struct {
	tokens [][]byte
	// sums are the tokens' SHA-256 digests: a request's token is hashed
	// and compared with them, so that neither the time taken nor an early
	// return on a length mismatch tells anything of a token.
	sums [][sha256.Size]byte
}

// TokensOf reads the tokens of cfg's api.token_file; nil without one.
func TokensOf(cfg *config.Config) (*Tokens, error) {
	toks, err := cfg.API.Tokens()
	if err != nil || toks == nil {
		return nil, err
	}
	return NewTokens(toks), nil
}

// NewTokens is the Tokens of toks.
func NewTokens(toks []string) *Tokens {
	au := &Tokens{tokens: make([][]byte, len(toks)), sums: make([][sha256.Size]byte, len(toks))}
	for i, t := range toks {
		au.tokens[i] = []byte(t)
		au.sums[i] = sha256.Sum256(au.tokens[i])
	}
	return au
}

// Count is the number of tokens; 0 for a nil Tokens.
func (au *Tokens) Count() int {
	if au == nil {
		return 0
	}
	return len(au.tokens)
}

// Same reports whether au and o hold the same tokens in the same order.
func (au *Tokens) Same(o *Tokens) bool {
	if au == nil || o == nil {
		return au == o
	}
	return slices.EqualFunc(au.tokens, o.tokens, bytes.Equal)
}

// Why a request was refused.
const (
	AuthOK = iota
	AuthMissing
	AuthInvalid
)

// Check reports whether r carries "Authorization: Bearer <token>" with one
// of the tokens. The token's digest is compared with every token's in
// constant time, so the time taken does not tell how much of a token
// matched, which one did, nor how long the tokens are.
func (au *Tokens) Check(r *http.Request) int { return au.CheckValues(r.Header["Authorization"]) }

// CheckValues is Check for the values of an Authorization header (or of
// the gRPC metadata key "authorization").
func (au *Tokens) CheckValues(v []string) int {
	if len(v) == 0 {
		return AuthMissing
	}
	const scheme = "bearer "
	h := v[0]
	if len(v) != 1 || len(h) <= len(scheme) || !asciiEqualFold(h[:len(scheme)], scheme) {
		return AuthInvalid
	}
	tok := h[len(scheme):]
	for len(tok) > 0 && tok[0] == ' ' {
		tok = tok[1:]
	}
	// A read-only view of the header's bytes: no copy on every request.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(tok), len(tok)))
	ok := 0
	for i := range au.sums {
		ok |= subtle.ConstantTimeCompare(sum[:], au.sums[i][:])
	}
	if ok == 1 {
		return AuthOK
	}
	return AuthInvalid
}

func asciiEqualFold(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// AuthOpen lists the API paths served without a token: the probes of load
// balancers and orchestrators, which say nothing about counts.
func AuthOpen(path string) bool { return path == "/healthz" || path == "/readyz" }

var (
	wwwAuthMissing = []string{`Bearer realm="geolimit"`}
	wwwAuthInvalid = []string{`Bearer realm="geolimit", error="invalid_token"`}
)

// Unauthorized answers 401 with WWW-Authenticate (RFC 6750) for a request
// refused for why (AuthMissing or AuthInvalid), and counts it in missing or
// invalid.
func Unauthorized(w http.ResponseWriter, why int, missing, invalid prometheus.Counter) {
	if why == AuthMissing {
		missing.Inc()
		w.Header()["Www-Authenticate"] = wwwAuthMissing
		WriteError(w, http.StatusUnauthorized, "unauthorized: Authorization: Bearer <token> required")
		return
	}
	invalid.Inc()
	w.Header()["Www-Authenticate"] = wwwAuthInvalid
	WriteError(w, http.StatusUnauthorized, "unauthorized: invalid bearer token")
}
