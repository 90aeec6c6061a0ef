package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keysYAML keys one rule on a header, so that the proxy and the API count
// the same (rule, value) pairs.
func keysYAML(upstream string) string {
	return fmt.Sprintf(`
listen: {api: "127.0.0.1:0", proxy: "127.0.0.1:0"}
proxy: {upstream: %q}
rules:
  - {name: tok, key: "header:X-Token", limit: 3, window: 1m}
`, upstream)
}

// A long value is one counter whichever front end carries it: spent twice
// through the proxy, it has exactly one spend left through the API.
func TestLongValueCountsAlikeThroughEveryFrontEnd(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, keysYAML(up.URL))
	long := strings.Repeat("v", 600)
	for range 2 {
		require.Equal(t, http.StatusOK, ta.Proxy("GET", "/", "X-Token", long).Status)
	}
	r := ta.Post("/v1/check", `{"rule":"tok","key":"`+long+`"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.EqualValues(t, 0, r.JSON(t)["remaining"])
	assert.Equal(t, long, r.JSON(t)["key"], "the answer names the value sent")
	assert.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"tok","key":"`+long+`"}`).Status)
	assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("GET", "/", "X-Token", long).Status)
	assert.EqualValues(t, 3, ta.KeyTotal("tok", url.PathEscape(long)), "GET /v1/keys looks the value up as it is counted")
}

// A client cannot spell a key that collides with a hashed one: an API key
// spelled "sha256:<hex of some long value>" is a counter of its own.
func TestHashedLookalikeKeyIsItsOwnCounter(t *testing.T) {
	up := servertest.NewUpstream(t)
	ta := startApp(t, keysYAML(up.URL))
	long := strings.Repeat("v", 600)
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:])
	for range 3 {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"tok","key":"`+forged+`"}`).Status)
	}
	assert.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"tok","key":"`+forged+`"}`).Status)
	assert.Equal(t, http.StatusTooManyRequests, ta.Proxy("GET", "/", "X-Token", forged).Status, "one counter through the proxy too")
	r := ta.Proxy("GET", "/", "X-Token", long)
	require.Equal(t, http.StatusOK, r.Status, "the long value's budget is untouched")
	assert.Equal(t, "2", r.Header.Get("X-RateLimit-Remaining"))
	assert.EqualValues(t, 3, ta.KeyTotal("tok", forged))
	assert.EqualValues(t, 1, ta.KeyTotal("tok", url.PathEscape(long)))
}
