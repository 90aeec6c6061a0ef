package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAPITokens: api.tokens gives each file's tokens its scopes, beside
// api.token_file's tokens of every scope, and counts as a token for a
// listener beyond loopback.
func TestAPITokens(t *testing.T) {
	admin := writeSecret(t, token+"\n")
	metrics := writeSecret(t, strings.Repeat("ab", 16)+"\n")
	app := writeSecret(t, strings.Repeat("cd", 16)+"\n"+strings.Repeat("ef", 16)+"\n")
	c, err := Parse([]byte("listen: {api: 0.0.0.0:8080}\napi:\n  token_file: " + admin +
		"\n  tokens:\n    - {file: " + metrics + ", scopes: [metrics]}\n    - {file: " + app + ", scopes: [read, decide]}\n"))
	require.NoError(t, err)
	creds, err := c.API.Credentials()
	require.NoError(t, err)
	assert.Equal(t, []Credential{
		{token, ScopeAll},
		{strings.Repeat("ab", 16), ScopeMetrics},
		{strings.Repeat("cd", 16), ScopeRead | ScopeDecide},
		{strings.Repeat("ef", 16), ScopeRead | ScopeDecide},
	}, creds)

	_, err = Parse([]byte("listen: {api: 0.0.0.0:8080}\napi: {tokens: [{file: " + metrics + ", scopes: [metrics]}]}\n"))
	require.NoError(t, err, "api.tokens alone authenticates a listener beyond loopback")

	for _, tt := range []struct{ name, tokens, want string }{
		{"unknown scope", "[{file: " + metrics + ", scopes: [metrics, write]}]",
			`api.tokens[0].scopes[1]: unknown scope "write" (want one of metrics, read, decide, admin)`},
		{"no scope", "[{file: " + metrics + "}]", "api.tokens[0].scopes: at least one of metrics, read, decide, admin required"},
		{"scope twice", "[{file: " + metrics + ", scopes: [read, read]}]", `api.tokens[0].scopes[1]: "read" listed twice`},
		{"no file", "[{scopes: [read]}]", "api.tokens[0].file: required"},
		{"unreadable file", "[{file: " + metrics + ", scopes: [read]}, {file: /nonexistent/t, scopes: [read]}]",
			"api.tokens[1].file: open /nonexistent/t: no such file or directory"},
		{"bad file", "[{file: " + writeSecret(t, "short\n") + ", scopes: [read]}]", "api.tokens[0].file: "},
		{"file twice", "[{file: " + metrics + ", scopes: [read]}, {file: " + metrics + ", scopes: [metrics]}]",
			"api.tokens[1].file: " + metrics + " is the file of api.tokens[0] already"},
		{"token_file again", "[{file: " + admin + ", scopes: [read]}]", "api.tokens[0].file: " + admin + " is the file of api.token_file already"},
		{"token in two files", "[{file: " + writeSecret(t, token+"\n") + ", scopes: [metrics]}]",
			"a token of api.token_file again (a token has one set of scopes)"},
		{"not a list", "x", "api.tokens: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte("api: {token_file: " + admin + ", tokens: " + tt.tokens + "}\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestScope(t *testing.T) {
	for _, name := range ScopeNames() {
		s, err := ParseScope(name)
		require.NoError(t, err)
		assert.Equal(t, name, s.String())
	}
	assert.True(t, ScopeMetrics.Has(ScopeMetrics))
	assert.False(t, ScopeMetrics.Has(ScopeAdmin))
	assert.False(t, (ScopeRead | ScopeDecide).Has(ScopeMetrics))
	assert.True(t, ScopeAdmin.Has(ScopeDecide), "admin grants every scope")
	assert.Equal(t, "metrics,read,decide,admin", ScopeAll.String())
}
