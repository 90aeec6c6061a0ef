package frontend_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

// A single-part key whose value is literally "sha256:<hex>" must not be the
// key of the (long) value whose digest it is: two different header values
// would share one counter (and one penalty box).
func TestKeyNeverCollides(t *testing.T) {
	long := "Bearer " + strings.Repeat("eyJhbGciOi", 40) // a JWT-sized value > MaxKeyLen
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:])
	assert.NotEqual(t, frontend.Key(long), frontend.Key(forged),
		"two different values must never give one key")
}

// The same through the classifier: a rule keyed on header:Authorization.
func TestClassifyHashedLookalikeKeys(t *testing.T) {
	env, _ := frontendtest.Env(t, `
rules:
  - {name: tok, key: "header:Authorization", limit: 2, window: 1m}
`)
	long := "Bearer " + strings.Repeat("eyJhbGciOi", 40)
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:])
	mk := func(v string) frontend.Origin {
		h := http.Header{}
		h.Set("Authorization", v)
		return frontend.Origin{Method: "GET", Path: "/", Host: "x", Header: h, IP: netip.MustParseAddr("203.0.113.9")}
	}
	// The attacker spends the victim's budget with a value of their own.
	for range 2 {
		o := mk(forged)
		c := env.DecideOrigin(env.Rules.Load(), &o, 429, nil)
		require.True(t, c.Allowed)
		c.Put()
	}
	o := mk(long)
	c := env.DecideOrigin(env.Rules.Load(), &o, 429, nil)
	defer c.Put()
	assert.True(t, c.Allowed, "the victim's first request is denied: its key was spent by another value")
}

// DecideOrigin returns early on an ambiguous request: the Checks it returns
// must not carry a former pooled request's results.
func TestAmbiguousDecideOriginHoldsNoStaleResults(t *testing.T) {
	env, _ := frontendtest.Env(t, classifyYAML)
	ok := origin("203.0.113.7", false, "GET", "/api/x", "X-User", "a")
	c := env.DecideOrigin(env.Rules.Load(), &ok, 429, nil)
	require.NotEmpty(t, c.Checks.Res)
	c.Put()
	o := origin("203.0.113.7", false, "GET", "/x", "X-User", "a", "X-User", "b")
	c = env.DecideOrigin(env.Rules.Load(), &o, 429, nil)
	defer c.Put()
	require.Equal(t, "X-User", o.Ambiguous)
	assert.Empty(t, c.Checks.Res, "nothing decided, yet Res holds the former request's decisions")
}
