package config

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/geolimit/geolimit/internal/listen"
)

// GenerateKeyHint is the command that makes a gossip key or an API token.
const GenerateKeyHint = "head -c 32 /dev/urandom | base64"

// MinTokenLen is the shortest API token accepted, in characters.
const MinTokenLen = 16

// IsLoopback reports whether addr (host:port) listens on loopback only
// (see listen.IsLoopbackHost).
func IsLoopback(addr string) bool { return listen.IsLoopback(addr) }

// secretLine is one non-blank, non-comment line of a secret file.
type secretLine struct {
	n    int // 1-based line number
	text string
}

// secretLines splits a secret file into its non-blank lines that do not
// start with '#', white space trimmed.
func secretLines(b []byte) []secretLine {
	var out []secretLine
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, secretLine{n: i + 1, text: l})
	}
	return out
}

// ReadGossipKeys reads a gossip key file: one key per line, each the base64
// of 16, 24 or 32 bytes (AES-128, -192 or -256); blank lines and lines
// starting with '#' are ignored. The first key encrypts, every key is
// accepted. A file of exactly 16, 24 or 32 bytes that holds no base64 key is
// one raw key. Errors name the file and the line.
func ReadGossipKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := parseGossipKeys(b)
	if err != nil && validKeyLen(len(b)) {
		// The single raw key format: the file is the key itself.
		return [][]byte{b}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

func parseGossipKeys(b []byte) ([][]byte, error) {
	lines := secretLines(b)
	if len(lines) == 0 {
		return nil, fmt.Errorf("no key (want one base64 key per line; generate one with: %s)", GenerateKeyHint)
	}
	keys := make([][]byte, 0, len(lines))
	first := map[string]int{}
	for _, l := range lines {
		k, err := base64.StdEncoding.DecodeString(l.text)
		if err != nil {
			return nil, fmt.Errorf("line %d: not base64 (%v)", l.n, err)
		}
		if !validKeyLen(len(k)) {
			return nil, fmt.Errorf("line %d: key of %d bytes (want 16, 24 or 32; generate one with: %s)", l.n, len(k), GenerateKeyHint)
		}
		if n, ok := first[string(k)]; ok {
			return nil, fmt.Errorf("line %d: the key of line %d again", l.n, n)
		}
		first[string(k)] = l.n
		keys = append(keys, k)
	}
	return keys, nil
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// ReadAPITokens reads an API token file: one bearer token per line, at least
// MinTokenLen characters of letters, digits and -._~+/= (base64 or hex
// fit); blank lines and lines starting with '#' are ignored. Errors name the
// file and the line.
func ReadAPITokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	toks, err := parseAPITokens(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return toks, nil
}

func parseAPITokens(b []byte) ([]string, error) {
	lines := secretLines(b)
	if len(lines) == 0 {
		return nil, fmt.Errorf("no token (want one token per line; generate one with: %s)", GenerateKeyHint)
	}
	toks := make([]string, 0, len(lines))
	first := map[string]int{}
	for _, l := range lines {
		if i := strings.IndexFunc(l.text, func(r rune) bool { return !tokenChar(r) }); i >= 0 {
			return nil, fmt.Errorf("line %d: character %q not allowed in a token (use letters, digits and -._~+/=)", l.n, l.text[i:i+1])
		}
		if len(l.text) < MinTokenLen {
			return nil, fmt.Errorf("line %d: token of %d characters (want at least %d; generate one with: %s)", l.n, len(l.text), MinTokenLen, GenerateKeyHint)
		}
		if n, ok := first[l.text]; ok {
			return nil, fmt.Errorf("line %d: the token of line %d again", l.n, n)
		}
		first[l.text] = l.n
		toks = append(toks, l.text)
	}
	return toks, nil
}

// tokenChar reports whether r may appear in a bearer token (RFC 6750's
// b64token).
func tokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("-._~+/=", r)
}

// Keys reads the gossip keys of SecretKeyFile (see ReadGossipKeys); nil
// without a file. Errors name the field.
func (g *Gossip) Keys() ([][]byte, error) {
	if g == nil || g.SecretKeyFile == "" {
		return nil, nil
	}
	keys, err := ReadGossipKeys(g.SecretKeyFile)
	if err != nil {
		return nil, fmt.Errorf("gossip.secret_key_file: %w", err)
	}
	return keys, nil
}

// validateAuth checks that every listener beyond loopback is authenticated
// (or explicitly insecure), and reads the key and token files.
func (c *Config) validateAuth() error {
	if g := c.Gossip; g != nil {
		if g.SecretKeyFile != "" {
			if _, err := g.Keys(); err != nil {
				return err
			}
		} else if !g.Insecure && !IsLoopback(g.Bind) {
			return fmt.Errorf("gossip.secret_key_file: required when gossip.bind %s listens beyond loopback (generate one with: %s > gossip.key), or write gossip.insecure: true", g.Bind, GenerateKeyHint)
		}
	}
	if c.API.HasTokens() {
		if _, err := c.API.Credentials(); err != nil {
			return err
		}
	} else if !c.API.Insecure && !IsLoopback(c.Listen.API) {
		return fmt.Errorf("api.token_file: required when listen.api %s listens beyond loopback (or api.tokens; generate a token with: %s > api-token), or write api.insecure: true", c.Listen.API, GenerateKeyHint)
	}
	return nil
}
