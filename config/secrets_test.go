package config

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeSecret writes body to a fresh file and returns its path.
func writeSecret(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

const (
	key16 = "0123456789abcdef"
	key32 = "0123456789abcdef0123456789abcdef"
	token = "c2VjcmV0LXRva2VuLTEyMzQ1Njc4OTA="
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7946":       true,
		"127.8.9.10:7946":      true,
		"[::1]:7946":           true,
		"localhost:8080":       false,
		"[::ffff:127.0.0.1]:1": true,
		"0.0.0.0:7946":         false,
		"[::]:7946":            false,
		":7946":                false,
		"10.0.0.11:7946":       false,
		"[2001:db8::1]:7946":   false,
		"edge.example.net:1":   false,
		"nonsense":             false,
	} {
		assert.Equal(t, want, IsLoopback(addr), addr)
	}
}

func TestGossipKeyRequiredBeyondLoopback(t *testing.T) {
	keyFile := writeSecret(t, b64(key32)+"\n")
	for _, tt := range []struct {
		name, gossip, want string
	}{
		{"wildcard", "{bind: 0.0.0.0:7946}", "gossip.secret_key_file: required when gossip.bind 0.0.0.0:7946 listens beyond loopback (generate one with: head -c 32 /dev/urandom | base64 > gossip.key), or write gossip.insecure: true"},
		{"empty host", "{bind: ':7946'}", "gossip.secret_key_file: required when gossip.bind :7946 listens beyond loopback"},
		{"ipv6 wildcard", "{bind: '[::]:7946'}", "gossip.secret_key_file: required when gossip.bind [::]:7946"},
		{"private address", "{bind: 10.0.0.11:7946}", "gossip.secret_key_file: required when gossip.bind 10.0.0.11:7946"},
		{"insecure false", "{bind: 10.0.0.11:7946, insecure: false}", "gossip.secret_key_file: required"},
		{"loopback", "{bind: 127.0.0.1:7946}", ""},
		{"loopback v6", "{bind: '[::1]:7946'}", ""},
		{"localhost", "{bind: 'localhost:7946'}", "gossip.secret_key_file: required when gossip.bind localhost:7946"},
		{"insecure", "{bind: 0.0.0.0:7946, insecure: true}", ""},
		{"keyed", "{bind: 0.0.0.0:7946, secret_key_file: " + keyFile + "}", ""},
		{"keyed loopback", "{bind: 127.0.0.1:7946, secret_key_file: " + keyFile + "}", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte("gossip: " + tt.gossip + "\n"))
			if tt.want == "" {
				require.NoError(t, err)
				assert.NotNil(t, c.Gossip)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestGossipKeyFile(t *testing.T) {
	p := writeSecret(t, "# encrypts\n"+b64(key32)+"\n\n  # accepted during the rotation\n"+b64(key16)+"  \r\n")
	c, err := Parse([]byte("gossip: {bind: 0.0.0.0:7946, secret_key_file: " + p + "}\n"))
	require.NoError(t, err)
	keys, err := c.Gossip.Keys()
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte(key32), []byte(key16)}, keys, "in file order: the first encrypts")

	// The single raw key format still reads as one key.
	raw := writeSecret(t, "\x00\x01#\n\xff\xfe"+key16[:10]+"0123456789abcdef")
	keys, err = ReadGossipKeys(raw)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.Len(t, keys[0], 32)

	for _, tt := range []struct{ name, body, want string }{
		{"empty file", "", "no key (want one base64 key per line; generate one with: head -c 32 /dev/urandom | base64)"},
		{"comments only", "# nothing yet\n\n", "no key"},
		{"bad base64", b64(key32) + "\n" + "not*base64!\n", "line 2: not base64"},
		{"wrong length", "# old\n" + b64(key32) + "\n" + b64("0123456789abcdefghij") + "\n", "line 3: key of 20 bytes (want 16, 24 or 32"},
		{"repeated key", b64(key16) + "\n" + b64(key32) + "\n" + b64(key16) + "\n", "line 3: the key of line 1 again"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := writeSecret(t, tt.body)
			_, err := Parse([]byte("gossip: {bind: 127.0.0.1:7946, secret_key_file: " + p + "}\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "gossip.secret_key_file: "+p+": "+tt.want)
		})
	}
	_, err = Parse([]byte("gossip: {bind: 127.0.0.1:7946, secret_key_file: /nonexistent/gossip.key}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gossip.secret_key_file: open /nonexistent/gossip.key: no such file or directory")
}

func TestAPITokenRequiredBeyondLoopback(t *testing.T) {
	tokFile := writeSecret(t, token+"\n")
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"wildcard", "listen: {api: 0.0.0.0:8080}", "api.token_file: required when listen.api 0.0.0.0:8080 listens beyond loopback (or api.tokens; generate a token with: head -c 32 /dev/urandom | base64 > api-token), or write api.insecure: true"},
		{"empty host", "listen: {api: ':8080'}", "api.token_file: required when listen.api :8080 listens beyond loopback"},
		{"public address", "listen: {api: '192.0.2.7:8080'}", "api.token_file: required when listen.api 192.0.2.7:8080"},
		{"default", "", ""},
		{"loopback", "listen: {api: '127.0.0.1:9000'}", ""},
		{"insecure", "listen: {api: 0.0.0.0:8080}\napi: {insecure: true}", ""},
		{"token", "listen: {api: 0.0.0.0:8080}\napi: {token_file: " + tokFile + "}", ""},
		{"token on loopback", "api: {token_file: " + tokFile + "}", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml + "\n"))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := Parse([]byte("listen: {api: 0.0.0.0:8080}\napi: {token: x}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "api.token: unknown field")
}

func TestAPITokenFile(t *testing.T) {
	p := writeSecret(t, "# current\n"+token+"\n\n# next\n"+strings.Repeat("ab", 16)+"\n")
	c, err := Parse([]byte("api: {token_file: " + p + "}\n"))
	require.NoError(t, err)
	creds, err := c.API.Credentials()
	require.NoError(t, err)
	assert.Equal(t, []Credential{{token, ScopeAll}, {strings.Repeat("ab", 16), ScopeAll}}, creds)

	for _, tt := range []struct{ name, body, want string }{
		{"empty file", "", "no token (want one token per line; generate one with: head -c 32 /dev/urandom | base64)"},
		{"comments only", "# none\n", "no token"},
		{"too short", token + "\nshort\n", "line 2: token of 5 characters (want at least 16"},
		{"white space inside", "Bearer " + token + "\n", `line 1: character " " not allowed in a token`},
		{"repeated token", token + "\n" + token + "\n", "line 2: the token of line 1 again"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := writeSecret(t, tt.body)
			_, err := Parse([]byte("api: {token_file: " + p + "}\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "api.token_file: "+p+": "+tt.want)
		})
	}
	_, err = Parse([]byte("api: {token_file: /nonexistent/api-token}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "api.token_file: open /nonexistent/api-token: no such file or directory")
}
