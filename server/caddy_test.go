package server

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCaddyForwardAuth puts a real Caddy, configured with the shipped
// examples/forward-auth/caddy/Caddyfile, in front of a real upstream, and
// geolimit's forward-auth listener behind its forward_auth directive. The
// client connects from 127.0.0.2, Caddy reaches geolimit from 127.0.0.1
// (the trusted proxy).
//
// It needs a caddy binary (2.5 or later): on PATH or named by
// GEOLIMIT_CADDY. Without one it skips, unless GEOLIMIT_REQUIRE_CADDY=1
// (as in CI), when it fails.
func TestCaddyForwardAuth(t *testing.T) {
	bin := caddyBinary(t)
	up, ta, ex := startForwardAuthExample(t)

	site := readFile(t, filepath.Join(ex, "caddy", "Caddyfile"))
	site = replaceOnce(t, site, "forward_auth 127.0.0.1:8090 {", "forward_auth "+ta.App.ForwardAuthAddr().String()+" {")
	site = replaceOnce(t, site, "reverse_proxy 127.0.0.1:9000", "reverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	addr := startCaddy(t, bin, func(listen string) string {
		// Plain HTTP on the test's port, bound to loopback; the site
		// block is otherwise the shipped one.
		s := replaceOnce(t, site, "{\n\tadmin off\n}\n", "") // the test writes its own global options
		return replaceOnce(t, s, "http://:8000 {", "http://:"+listen+" {")
	})

	send := clientFrom2(t, addr)
	injections := [][]string{
		nil,
		{"X-Forwarded-Uri", "/static/app.js", "X-Forwarded-Method", "GET"},
		{"X-Original-URI", "/static/app.js", "X-Original-Method", "GET"},
		{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-Host", "other.example.com"},
		{"X-Geolimit-Deny-Status", "200"},
	}

	// login: 5 per minute per client address.
	for i := 0; i < 5; i++ {
		r := send("POST", "/login", injections[i]...)
		require.Equal(t, http.StatusOK, r.Status, "request %d: %s", i, r.Body)
		assert.Equal(t, "hello from upstream POST /login", string(r.Body))
	}
	require.Equal(t, 5, up.Count())
	for _, inj := range injections {
		r := send("POST", "/login", inj...)
		assertLoginDenied(t, r, inj)
		assert.Equal(t, `"login";q=5;w=60`, r.Header.Get("RateLimit-Policy"), "the denial reaches the client as geolimit wrote it")
	}
	assert.Equal(t, 5, up.Count(), "the upstream saw only the allowed requests")
	assert.EqualValues(t, 5, ta.KeyTotal("login", "127.0.0.2"))
	assert.EqualValues(t, 5, ta.KeyTotal("per-ip", "127.0.0.2"), "denied requests spent nothing of per-ip")
	for _, k := range []string{"6.6.6.6", "127.0.0.1"} {
		assert.EqualValues(t, 0, ta.KeyTotal("login", k))
		assert.EqualValues(t, 0, ta.KeyTotal("per-ip", k))
	}

	// Other paths pass and count against per-ip and per-api-key.
	for range 2 {
		r := send("GET", "/api/items", "X-Api-Key", "k-1")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	assert.EqualValues(t, 2, ta.KeyTotal("per-api-key", "k-1"))
	assert.EqualValues(t, 7, ta.KeyTotal("per-ip", "127.0.0.2"))
	assert.Equal(t, 7, up.Count())
}

// caddyBinary finds caddy, or skips (fails with GEOLIMIT_REQUIRE_CADDY=1).
func caddyBinary(t *testing.T) string {
	t.Helper()
	return proxyBinary(t, "caddy", "GEOLIMIT_CADDY", "GEOLIMIT_REQUIRE_CADDY", "", func(bin string) string {
		if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil {
			return "caddy version failed: " + err.Error() + ": " + string(out)
		}
		return ""
	})
}

// startCaddy runs caddy in the foreground with the Caddyfile site(port)
// behind global options that turn off the admin endpoint and automatic
// HTTPS, with its data and config directories in a temporary directory, and
// returns its address once it accepts connections. It is stopped when the
// test ends.
func startCaddy(t *testing.T, bin string, site func(port string) string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		addr, inUse := tryCaddy(t, bin, site)
		if !inUse {
			return addr
		}
		if attempt == 3 {
			t.Fatalf("caddy: no free port after %d attempts", attempt+1)
		}
	}
}

func tryCaddy(t *testing.T, bin string, site func(port string) string) (addr string, inUse bool) {
	t.Helper()
	dir := t.TempDir()
	addr = freeAddr(t)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	conf := "{\n\tadmin off\n\tauto_https off\n}\n\n" + site(port)
	path := filepath.Join(dir, "Caddyfile")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	var out servertest.LogBuffer
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	p := startProc(t, cmd)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if p.exited() {
			if strings.Contains(out.String(), "address already in use") {
				return "", true
			}
			t.Fatalf("caddy exited: %v\n%s", p.err, out.String())
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("caddy logs:\n%s", out.String())
				}
			})
			return addr, false
		}
		if time.Now().After(deadline) {
			p.stop()
			t.Fatalf("caddy did not accept connections on %s\n%s", addr, out.String())
		}
		time.Sleep(10 * time.Millisecond) // a poll (by hand: it stops early when the process exits)
	}
}

// proc is a child process of a test, stopped (SIGTERM, then SIGKILL after
// 10 s) when the test ends.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // Wait's error, set before done is closed
	once sync.Once
}

// startProc starts cmd and registers its stop with t.Cleanup.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}
