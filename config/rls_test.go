package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const rlsRules = `
rules:
  - {name: per-ip, limit: 10, window: 1m}
  - {name: per-user, limit: 100, window: 1h}
`

func TestParseRLS(t *testing.T) {
	c, err := Parse([]byte(rlsRules + `
listen: {grpc: 127.0.0.1:8081}
rls:
  domains:
    - domain: edge
      descriptors:
        - entries: [remote_address]
          rule: per-ip
        - entries: [generic_key=api, user_id]
          rule: per-user
`))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8081", c.Listen.GRPC)
	assert.Equal(t, RLS{Domains: []RLSDomain{{Domain: "edge", Descriptors: []RLSDescriptor{
		{Entries: []string{"remote_address"}, Rule: "per-ip"},
		{Entries: []string{"generic_key=api", "user_id"}, Rule: "per-user"},
	}}}}, c.RLS)
	assert.Empty(t, DefaultConfig().Listen.GRPC, "the rate limit service is off by default")

	e, err := ParseRLSEntry("header_match=a=b")
	require.NoError(t, err)
	assert.Equal(t, RLSEntry{Key: "header_match", Value: "a=b"}, e, "split at the first '='")
	e, err = ParseRLSEntry("user_id")
	require.NoError(t, err)
	assert.Equal(t, RLSEntry{Key: "user_id"}, e)
}

func TestRLSErrors(t *testing.T) {
	dom := func(desc string) string {
		return rlsRules + "rls:\n  domains:\n    - domain: edge\n      descriptors:\n" + desc
	}
	tests := []struct {
		name, in, want string
	}{
		{"bad listen", "listen: {grpc: nowhere}", "listen.grpc:"},
		{"listener without domains", "listen: {grpc: 127.0.0.1:8081}", "rls.domains: required when listen.grpc is set"},
		{"empty domain", rlsRules + "rls: {domains: [{domain: '', descriptors: [{entries: [a], rule: per-ip}]}]}", "rls.domains[0].domain: required"},
		{"duplicate domain", rlsRules + "rls: {domains: [{domain: d, descriptors: [{entries: [a], rule: per-ip}]}, {domain: d, descriptors: [{entries: [a], rule: per-ip}]}]}",
			`rls.domains[1].domain: "d" already used by rls.domains[0]`},
		{"no descriptors", rlsRules + "rls: {domains: [{domain: d}]}", "rls.domains[0].descriptors: at least one required"},
		{"no entries", dom("        - {rule: per-ip}\n"), "rls.domains[0].descriptors[0].entries: at least one required"},
		{"empty entry key", dom("        - {entries: [a, '=x'], rule: per-ip}\n"), `rls.domains[0].descriptors[0].entries[1]: "=x": the key must not be empty`},
		{"empty entry value", dom("        - {entries: ['a='], rule: per-ip}\n"), `rls.domains[0].descriptors[0].entries[0]: "a=": the value after '=' must not be empty`},
		{"no rule", dom("        - {entries: [a]}\n"), "rls.domains[0].descriptors[0].rule: required"},
		{"unknown rule", dom("        - {entries: [a], rule: per-host}\n"), `rls.domains[0].descriptors[0].rule: unknown rule "per-host" (rules: per-ip, per-user)`},
		{"same entries twice", dom("        - {entries: [a, b=1], rule: per-ip}\n        - {entries: [a, b=1], rule: per-user}\n"),
			"rls.domains[0].descriptors[1].entries: same entries as rls.domains[0].descriptors[0]"},
		{"unknown field", dom("        - {entries: [a], rule: per-ip, limit: 5}\n"), "rls.domains[0].descriptors[0].limit: unknown field"},
		{"idempotency key not an entry", dom("        - {entries: [a, b], rule: per-ip, idempotency_key: c}\n"),
			`rls.domains[0].descriptors[0].idempotency_key: "c" is not the key of exactly one of entries`},
		{"idempotency key with a fixed value", dom("        - {entries: [a, 'c=1'], rule: per-ip, idempotency_key: c}\n"),
			`rls.domains[0].descriptors[0].idempotency_key: "c": the idempotency key's entry must not have a fixed value`},
		{"idempotency key the only entry", dom("        - {entries: [c], rule: per-ip, idempotency_key: c}\n"),
			`rls.domains[0].descriptors[0].idempotency_key: "c": the descriptor needs another entry to form the key`},
		{"beyond loopback without token", rlsRules + "listen: {grpc: '0.0.0.0:8081'}\nrls: {domains: [{domain: d, descriptors: [{entries: [a], rule: per-ip}]}]}",
			"api.token_file: required when listen.grpc 0.0.0.0:8081 listens beyond loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestRLSIdempotencyKey(t *testing.T) {
	c, err := Parse([]byte(rlsRules + `
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [remote_address, idempotency_key], rule: per-ip, idempotency_key: idempotency_key}
`))
	require.NoError(t, err)
	assert.Equal(t, "idempotency_key", c.RLS.Domains[0].Descriptors[0].IdempotencyKey)
}

func TestRLSListenerProtection(t *testing.T) {
	const domains = "rls: {domains: [{domain: d, descriptors: [{entries: [a], rule: per-ip}]}]}\n"
	// api.insecure does not open the gRPC listener: each listener has its own switch.
	_, err := Parse([]byte(rlsRules + domains + "listen: {grpc: '0.0.0.0:8081'}\napi: {insecure: true}\n"))
	require.ErrorContains(t, err, "or write rls.insecure: true")

	c, err := Parse([]byte(rlsRules + "listen: {grpc: '0.0.0.0:8081'}\nrls: {insecure: true, domains: [{domain: d, descriptors: [{entries: [a], rule: per-ip}]}]}\n"))
	require.NoError(t, err)
	assert.True(t, c.RLS.Insecure)

	tok := filepath.Join(t.TempDir(), "api-token")
	require.NoError(t, os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	_, err = Parse([]byte(rlsRules + domains + "listen: {api: '0.0.0.0:8080', grpc: '0.0.0.0:8081'}\napi: {token_file: " + tok + "}\n"))
	require.NoError(t, err, "the API's tokens protect the gRPC listener too")
}
