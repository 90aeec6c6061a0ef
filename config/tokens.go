package config

import (
	"fmt"
	"strings"
)

// Scope is a set of API permissions a bearer token grants (a bit set).
// The zero Scope grants nothing.
type Scope uint8

// The scopes of api.tokens. Which endpoints each one opens is decided in
// one place, frontend.ScopeOf.
const (
	// ScopeMetrics reads /metrics (a Prometheus scraper's token).
	ScopeMetrics Scope = 1 << iota
	// ScopeRead reads counts and state without spending: GET
	// /v1/keys/{rule}/{key}, /v1/status.
	ScopeRead
	// ScopeDecide spends counts: /v1/check, /v1/checks, /v1/acquire,
	// /v1/release and the rate limit service (gRPC).
	ScopeDecide
	// ScopeAdmin is everything else (the kill switch PUT
	// /v1/rules/{name}/mode among it), and implies every other scope.
	ScopeAdmin

	// ScopeAll is every scope: the tokens of api.token_file.
	ScopeAll = ScopeMetrics | ScopeRead | ScopeDecide | ScopeAdmin
)

var scopeNames = [...]string{"metrics", "read", "decide", "admin"}

// ScopeNames lists the scopes' names in the order of their bits.
func ScopeNames() []string { return scopeNames[:] }

// ParseScope is the Scope of one name of ScopeNames.
func ParseScope(name string) (Scope, error) {
	for i, n := range scopeNames {
		if n == name {
			return Scope(1) << i, nil
		}
	}
	return 0, fmt.Errorf("unknown scope %q (want one of %s)", name, strings.Join(scopeNames[:], ", "))
}

// Has reports whether s grants need: admin grants every scope.
func (s Scope) Has(need Scope) bool { return s&need == need || s&ScopeAdmin != 0 }

// String lists the names of s's scopes, comma-separated.
func (s Scope) String() string {
	var names []string
	for i, n := range scopeNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// APIToken is one entry of api.tokens: a token file whose tokens grant
// only Scopes.
type APIToken struct {
	// File holds bearer tokens, one per line (see ReadAPITokens).
	File string `yaml:"file"`
	// Scopes are the permissions of the file's tokens: metrics, read,
	// decide, admin (see Scope). At least one.
	Scopes []string `yaml:"scopes"`
}

// Credential is one bearer token and the scopes it grants.
type Credential struct {
	Token  string
	Scopes Scope
}

// HasTokens reports whether the API takes bearer tokens (api.token_file
// or api.tokens set).
func (a *API) HasTokens() bool { return a.TokenFile != "" || len(a.Tokens) > 0 }

// Credentials reads the tokens of TokenFile (every scope) and of each file
// of Tokens (its scopes); nil when neither is set. Errors name the field:
// an unknown, repeated or missing scope, an unreadable or bad file, a file
// listed twice, or a token found in two files (its scopes would be
// ambiguous).
func (a *API) Credentials() ([]Credential, error) {
	if !a.HasTokens() {
		return nil, nil
	}
	var out []Credential
	where := map[string]string{} // token -> the field it was read from
	add := func(field, path string, s Scope) error {
		toks, err := ReadAPITokens(path)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		for _, t := range toks {
			if w, ok := where[t]; ok {
				return fmt.Errorf("%s: %s: a token of %s again (a token has one set of scopes)", field, path, w)
			}
			where[t] = field
			out = append(out, Credential{Token: t, Scopes: s})
		}
		return nil
	}
	if a.TokenFile != "" {
		if err := add("api.token_file", a.TokenFile, ScopeAll); err != nil {
			return nil, err
		}
	}
	files := map[string]string{a.TokenFile: "api.token_file"}
	for i, t := range a.Tokens {
		field := fmt.Sprintf("api.tokens[%d]", i)
		if t.File == "" {
			return nil, fmt.Errorf("%s.file: required (a file of bearer tokens, one per line)", field)
		}
		if w, ok := files[t.File]; ok {
			return nil, fmt.Errorf("%s.file: %s is the file of %s already", field, t.File, w)
		}
		files[t.File] = field
		if len(t.Scopes) == 0 {
			return nil, fmt.Errorf("%s.scopes: at least one of %s required", field, strings.Join(scopeNames[:], ", "))
		}
		var s Scope
		for j, name := range t.Scopes {
			b, err := ParseScope(name)
			if err != nil {
				return nil, fmt.Errorf("%s.scopes[%d]: %w", field, j, err)
			}
			if s&b != 0 {
				return nil, fmt.Errorf("%s.scopes[%d]: %q listed twice", field, j, name)
			}
			s |= b
		}
		if err := add(field+".file", t.File, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}
