package frontend

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/config"
)

// Tokens holds the API's bearer tokens (api.token_file and api.tokens) and
// the scopes each one grants. An App without tokens has a nil *Tokens, and
// its handler pays one nil check. Safe for concurrent use (read-only).
type Tokens struct {
	tokens [][]byte
	scopes []config.Scope
	// sums are the tokens' SHA-256 digests: a request's token is hashed
	// and compared with them, so that neither the time taken nor an early
	// return on a length mismatch tells anything of a token.
	sums [][sha256.Size]byte
}

// TokensOf reads the tokens of cfg's api.token_file and api.tokens; nil
// without either.
func TokensOf(cfg *config.Config) (*Tokens, error) {
	creds, err := cfg.API.Credentials()
	if err != nil || creds == nil {
		return nil, err
	}
	return NewScopedTokens(creds), nil
}

// NewTokens is the Tokens of toks, each granting every scope.
func NewTokens(toks []string) *Tokens {
	creds := make([]config.Credential, len(toks))
	for i, t := range toks {
		creds[i] = config.Credential{Token: t, Scopes: config.ScopeAll}
	}
	return NewScopedTokens(creds)
}

// NewScopedTokens is the Tokens of creds.
func NewScopedTokens(creds []config.Credential) *Tokens {
	n := len(creds)
	au := &Tokens{tokens: make([][]byte, n), scopes: make([]config.Scope, n), sums: make([][sha256.Size]byte, n)}
	for i, c := range creds {
		au.tokens[i] = []byte(c.Token)
		au.scopes[i] = c.Scopes
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
	return slices.EqualFunc(au.tokens, o.tokens, bytes.Equal) && slices.Equal(au.scopes, o.scopes)
}

// Why a request was refused.
const (
	AuthOK = iota
	AuthMissing
	AuthInvalid
	// AuthForbidden: a valid token without the scope needed.
	AuthForbidden
)

// Check reports whether r carries "Authorization: Bearer <token>" with one
// of the tokens, of any scope. The token's digest is compared with every
// token's in constant time, so the time taken does not tell how much of a
// token matched, which one did, nor how long the tokens are.
func (au *Tokens) Check(r *http.Request) int { return au.CheckValues(r.Header["Authorization"]) }

// Authorize is Check for a request that needs the scope need: a valid
// token without it is AuthForbidden.
func (au *Tokens) Authorize(r *http.Request, need config.Scope) int {
	return au.AuthorizeValues(r.Header["Authorization"], need)
}

// CheckValues is Check for the values of an Authorization header (or of
// the gRPC metadata key "authorization").
func (au *Tokens) CheckValues(v []string) int {
	why, _ := au.scopeOf(v)
	return why
}

// AuthorizeValues is Authorize for the values of an Authorization header
// (or of the gRPC metadata key "authorization").
func (au *Tokens) AuthorizeValues(v []string, need config.Scope) int {
	why, s := au.scopeOf(v)
	if why == AuthOK && !s.Has(need) {
		return AuthForbidden
	}
	return why
}

// scopeOf finds the token of the header values v and its scopes.
func (au *Tokens) scopeOf(v []string) (int, config.Scope) {
	if len(v) == 0 {
		return AuthMissing, 0
	}
	const scheme = "bearer "
	h := v[0]
	if len(v) != 1 || len(h) <= len(scheme) || !asciiEqualFold(h[:len(scheme)], scheme) {
		return AuthInvalid, 0
	}
	tok := h[len(scheme):]
	for len(tok) > 0 && tok[0] == ' ' {
		tok = tok[1:]
	}
	// A read-only view of the header's bytes: no copy on every request.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(tok), len(tok)))
	ok, scopes := 0, 0
	for i := range au.sums {
		eq := subtle.ConstantTimeCompare(sum[:], au.sums[i][:])
		ok |= eq
		scopes |= -eq & int(au.scopes[i]) // no branch on which token matched
	}
	if ok == 1 {
		return AuthOK, config.Scope(scopes)
	}
	return AuthInvalid, 0
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

// ScopeOf is the scope a request of method on an API path needs: metrics
// for /metrics; read for the views that spend and change nothing
// (/v1/keys/..., /v1/status, /ui, and GET of a rule's mode); decide for the
// decision endpoints; admin for everything else (setting a rule's mode, the
// kill switch, among it). The one table of what each scope opens.
func ScopeOf(method, path string) config.Scope {
	switch path {
	case "/metrics":
		return config.ScopeMetrics
	case "/v1/check", "/v1/checks", "/v1/acquire", "/v1/release":
		return config.ScopeDecide
	case "/v1/status", "/v1/activity", "/v1/hotkeys", "/ui":
		return config.ScopeRead
	}
	switch {
	case strings.HasPrefix(path, "/v1/keys/"), strings.HasPrefix(path, "/ui/"):
		return config.ScopeRead
	case strings.HasPrefix(path, "/v1/rules/") && (method == http.MethodGet || method == http.MethodHead):
		return config.ScopeRead
	}
	return config.ScopeAdmin
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

// Forbidden answers 403 for a valid token that lacks the scope need, with
// a JSON error naming it ({"error": ..., "scope": need}), and counts it in
// forbidden.
func Forbidden(w http.ResponseWriter, need config.Scope, forbidden prometheus.Counter) {
	forbidden.Inc()
	name := need.String()
	b := make([]byte, 0, 96)
	b = append(b, `{"error":`...)
	b = AppendString(b, "forbidden: this token lacks the scope "+name)
	b = append(b, `,"scope":`...)
	b = AppendString(b, name)
	b = append(b, "}\n"...)
	w.Header()[HContentType] = JSONType
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(b)
}
