package server

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHAProxySPOA puts a real HAProxy, configured with the shipped
// examples/haproxy files, in front of a real upstream, and geolimit's SPOE
// agent (listen.spoa) behind its spoe filter. The client connects from
// 127.0.0.2, HAProxy reaches geolimit from 127.0.0.1 (the trusted proxy).
//
// It needs haproxy: on PATH, in /usr/sbin, or named by GEOLIMIT_HAPROXY.
// Without one it skips, unless GEOLIMIT_REQUIRE_HAPROXY=1 (as in CI), when
// it fails.
func TestHAProxySPOA(t *testing.T) {
	bin := proxyBinary(t, "haproxy", "GEOLIMIT_HAPROXY", "GEOLIMIT_REQUIRE_HAPROXY", "/usr/sbin/haproxy", func(bin string) string {
		if out, err := exec.Command(bin, "-v").CombinedOutput(); err != nil {
			return "haproxy -v failed: " + err.Error() + ": " + string(out)
		}
		return ""
	})
	up := servertest.NewUpstream(t)
	ex := filepath.Join("..", "examples", "haproxy")
	yaml := readFile(t, filepath.Join(ex, "geolimit.yaml"))
	yaml = replaceOnce(t, yaml, "127.0.0.1:8080", "127.0.0.1:0")
	yaml = replaceOnce(t, yaml, "127.0.0.1:12345", "127.0.0.1:0")
	ta := startApp(t, yaml)
	require.NotNil(t, ta.App.SPOAAddr())

	dir := t.TempDir()
	copyFile(t, filepath.Join(ex, "geolimit-spoe.conf"), filepath.Join(dir, "geolimit-spoe.conf"))
	cfg := readFile(t, filepath.Join(ex, "haproxy.cfg"))
	cfg = replaceOnce(t, cfg, "server geolimit 127.0.0.1:12345", "server geolimit "+ta.App.SPOAAddr().String())
	cfg = replaceOnce(t, cfg, "server app 127.0.0.1:9000", "server app "+strings.TrimPrefix(up.URL, "http://"))
	addr := startHAProxy(t, bin, dir, func(listen string) string {
		return replaceOnce(t, cfg, "bind 127.0.0.1:8000", "bind "+listen)
	})
	send := clientFrom2(t, addr)

	// login: 5 per minute per client address; what a client adds does not
	// move the key.
	for i := 0; i < 5; i++ {
		r := send("POST", "/login", "X-Forwarded-For", "6.6.6.6")
		require.Equal(t, http.StatusOK, r.Status, "request %d: %s", i, r.Body)
		assert.Equal(t, "hello from upstream POST /login", string(r.Body))
		assert.Equal(t, `"login";q=5;w=60`, r.Header.Get("RateLimit-Policy"), "geolimit's headers reach the client")
		name, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
		assert.Equal(t, "login", name)
		assert.EqualValues(t, 4-i, p["r"])
		assert.Equal(t, "5", r.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, []string{strconv.Itoa(4 - i)}, r.Header.Values("X-RateLimit-Remaining"))
		assert.Empty(t, r.Header.Get("Retry-After"))
	}
	require.Equal(t, 5, up.Count())
	for range 2 {
		r := send("POST", "/login")
		assertLoginDenied(t, r, nil)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		assert.Equal(t, `"login";q=5;w=60`, r.Header.Get("RateLimit-Policy"))
		assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
		assert.Equal(t, r.Header.Get("Retry-After"), r.Header.Get("X-RateLimit-Reset"))
	}
	assert.Equal(t, 5, up.Count(), "the upstream never saw the denied requests")
	assert.EqualValues(t, 5, ta.KeyTotal("login", "127.0.0.2"))
	assert.EqualValues(t, 5, ta.KeyTotal("per-ip", "127.0.0.2"), "denied requests spent nothing of per-ip")
	for _, k := range []string{"6.6.6.6", "127.0.0.1"} {
		assert.EqualValues(t, 0, ta.KeyTotal("login", k))
	}
	assert.EqualValues(t, 2, ta.Decisions("login", "denied"))

	// Header keys: counted per key; a key header sent twice is refused
	// and counts nothing.
	r := send("GET", "/api/items", "X-Api-Key", "k1")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, `"per-ip";q=100;w=60`, r.Header.Get("RateLimit-Policy"))
	assert.EqualValues(t, 1, ta.KeyTotal("per-api-key", "k1"))
	r = send("GET", "/api/items", "X-Api-Key", "k1", "X-Api-Key", "k2")
	assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1, ta.KeyTotal("per-api-key", "k1"))
	assert.EqualValues(t, 6, ta.KeyTotal("per-ip", "127.0.0.2"))
	assert.Equal(t, 6, up.Count())

	// The agent's decisions are timed.
	m := ta.Get("/metrics")
	assert.Contains(t, string(m.Body), `geolimit_decision_duration_seconds_count{endpoint="spoa"} 9`)
}

// startHAProxy writes haproxy.cfg (cfg(listen)) into dir, runs haproxy in
// the foreground there and returns its address once it accepts
// connections. It is stopped when the test ends.
func startHAProxy(t *testing.T, bin, dir string, cfg func(listen string) string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		addr := freeAddr(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(cfg(addr)), 0o644))
		var out servertest.LogBuffer
		cmd := exec.Command(bin, "-db", "-f", "haproxy.cfg")
		cmd.Dir = dir // the spoe filter's config path is relative
		cmd.Stdout, cmd.Stderr = &out, &out
		p := startProc(t, cmd)
		deadline := time.Now().Add(15 * time.Second)
		for {
			if p.exited() {
				if strings.Contains(out.String(), "ddress already in use") && attempt < 3 {
					break // the free port was taken meanwhile: another one
				}
				t.Fatalf("haproxy exited: %v\n%s", p.err, out.String())
			}
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("haproxy output:\n%s", out.String())
					}
				})
				return addr
			}
			if time.Now().After(deadline) {
				p.stop()
				t.Fatalf("haproxy did not accept connections on %s\n%s", addr, out.String())
			}
			time.Sleep(10 * time.Millisecond) // a poll (by hand: it stops early when the process exits)
		}
	}
}

// TestHAProxySPOAIdleConnections: connections that hold the SPOA
// listener's per-client cap idle (http.max_connections_per_client, here
// 20, from 127.0.0.1, the address HAProxy comes from too) do not lock
// HAProxy out: its connection takes the place of the stalest idle one, and
// idle connections opened later take one another's places, not HAProxy's,
// whose connections carry frames. Were HAProxy refused, its SPOE would
// fail open and the login limit would let everything through.
func TestHAProxySPOAIdleConnections(t *testing.T) {
	bin := proxyBinary(t, "haproxy", "GEOLIMIT_HAPROXY", "GEOLIMIT_REQUIRE_HAPROXY", "/usr/sbin/haproxy", func(bin string) string {
		if out, err := exec.Command(bin, "-v").CombinedOutput(); err != nil {
			return "haproxy -v failed: " + err.Error() + ": " + string(out)
		}
		return ""
	})
	up := servertest.NewUpstream(t)
	ex := filepath.Join("..", "examples", "haproxy")
	yaml := readFile(t, filepath.Join(ex, "geolimit.yaml"))
	yaml = replaceOnce(t, yaml, "127.0.0.1:8080", "127.0.0.1:0")
	yaml = replaceOnce(t, yaml, "127.0.0.1:12345", "127.0.0.1:0")
	ta := startApp(t, yaml+"http: {max_connections_per_client: 20}\n")
	spoaAddr := ta.App.SPOAAddr().String()

	idle := func(n int) {
		t.Helper()
		for range n {
			c, err := net.Dial("tcp", spoaAddr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
		}
	}
	idle(20)
	require.Eventually(t, func() bool { return ta.App.spoa.Conns() == 20 }, wait, poll, "the idle connections hold the cap")

	dir := t.TempDir()
	copyFile(t, filepath.Join(ex, "geolimit-spoe.conf"), filepath.Join(dir, "geolimit-spoe.conf"))
	cfg := readFile(t, filepath.Join(ex, "haproxy.cfg"))
	cfg = replaceOnce(t, cfg, "server geolimit 127.0.0.1:12345", "server geolimit "+spoaAddr)
	cfg = replaceOnce(t, cfg, "server app 127.0.0.1:9000", "server app "+strings.TrimPrefix(up.URL, "http://"))
	addr := startHAProxy(t, bin, dir, func(listen string) string {
		return replaceOnce(t, cfg, "bind 127.0.0.1:8000", "bind "+listen)
	})
	send := clientFrom2(t, addr)
	for i := range 5 {
		r := send("POST", "/login")
		require.Equal(t, http.StatusOK, r.Status, "request %d: %s", i, r.Body)
		require.Equal(t, `"login";q=5;w=60`, r.Header.Get("RateLimit-Policy"), "request %d: geolimit answered", i)
	}
	assertLoginDenied(t, send("POST", "/login"), nil)

	// More idle connections replace the idle ones, not HAProxy's.
	idle(40)
	require.Eventually(t, func() bool { return ta.App.spoa.Replaced() >= 41 }, wait, poll)
	for range 3 {
		assertLoginDenied(t, send("POST", "/login"), nil)
	}
	assert.EqualValues(t, 5, ta.KeyTotal("login", "127.0.0.2"))
	assert.Equal(t, 5, up.Count(), "the upstream never saw a denied request")
	m := string(ta.Get("/metrics").Body)
	assert.Contains(t, m, "geolimit_spoa_connections_replaced_total ")
}
