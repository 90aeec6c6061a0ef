package server

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// startForwardAuthExample starts a real upstream and geolimit with the
// shipped examples/forward-auth/geolimit.yaml on free ports, for a proxy
// test to put its proxy between them; ex is the examples directory.
func startForwardAuthExample(t *testing.T) (up *servertest.Upstream, ta *testApp, ex string) {
	t.Helper()
	up = servertest.NewUpstream(t)
	ex = filepath.Join("..", "examples", "forward-auth")
	yaml := readFile(t, filepath.Join(ex, "geolimit.yaml"))
	yaml = replaceOnce(t, yaml, "127.0.0.1:8080", "127.0.0.1:0")
	yaml = replaceOnce(t, yaml, "127.0.0.1:8090", "127.0.0.1:0")
	return up, startApp(t, yaml), ex
}

// TestNginxForwardAuth puts a real nginx, configured with the shipped
// examples/forward-auth files, in front of a real upstream, and geolimit's
// forward-auth listener behind auth_request. The client connects from
// 127.0.0.2, nginx reaches geolimit from 127.0.0.1 (the trusted proxy).
//
// It needs nginx with ngx_http_auth_request_module: on PATH, in
// /usr/sbin, or named by GEOLIMIT_NGINX. Without one it skips, unless
// GEOLIMIT_REQUIRE_NGINX=1 (as in CI), when it fails.
func TestNginxForwardAuth(t *testing.T) {
	bin := nginxBinary(t)
	up, ta, ex := startForwardAuthExample(t)

	dir := t.TempDir()
	site := readFile(t, filepath.Join(ex, "nginx", "site.conf"))
	site = replaceOnce(t, site, "server 127.0.0.1:8090;", "server "+ta.App.ForwardAuthAddr().String()+";")
	site = replaceOnce(t, site, "proxy_pass http://127.0.0.1:9000;", "proxy_pass "+up.URL+";")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "geolimit"), 0o755))
	for _, f := range []string{"locations.conf", "protect.conf"} {
		copyFile(t, filepath.Join(ex, "nginx", "geolimit", f), filepath.Join(dir, "geolimit", f))
	}
	nginxAddr := startNginx(t, bin, dir, func(listen string) string {
		return replaceOnce(t, site, "listen 80;", "listen "+listen+";")
	})

	send := clientFrom2(t, nginxAddr)
	const (
		toShadow = `zzz","rule":"shadow-all`
		toOther  = `mine","key":"other-customer`
	)
	// What a client may add to steer the decision: another URI, method,
	// host or address, another status, the other spelling.
	injections := [][]string{
		nil,
		{"X-Forwarded-Uri", "/static/app.js", "X-Forwarded-Method", "GET"},
		{"X-Original-URI", "/static/app.js", "X-Original-Method", "GET"},
		{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-Host", "other.example.com"},
		{"X-Geolimit-Deny-Status", "200", "X-Api-Key", toShadow},
	}

	// login: 5 per minute per client address.
	for i := 0; i < 5; i++ {
		r := send("POST", "/login", injections[i]...)
		require.Equal(t, http.StatusOK, r.Status, "request %d: %s", i, r.Body)
		assert.Equal(t, "hello from upstream POST /login", string(r.Body))
		assert.Equal(t, `"login";q=5;w=60`, r.Header.Get("RateLimit-Policy"), "geolimit's headers reach the client")
		name, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
		assert.Equal(t, "login", name)
		assert.EqualValues(t, 4-i, p["r"])
	}
	require.Equal(t, 5, up.Count())
	for _, inj := range injections {
		assertLoginDenied(t, send("POST", "/login", inj...), inj)
	}
	assert.Equal(t, 5, up.Count(), "the upstream saw only the allowed requests")
	assert.EqualValues(t, 5, ta.KeyTotal("login", "127.0.0.2"))
	assert.EqualValues(t, 5, ta.KeyTotal("per-ip", "127.0.0.2"), "denied requests spent nothing of per-ip")
	for _, k := range []string{"6.6.6.6", "127.0.0.1"} {
		assert.EqualValues(t, 0, ta.KeyTotal("login", k))
		assert.EqualValues(t, 0, ta.KeyTotal("per-ip", k))
	}
	assert.EqualValues(t, 5, ta.Decisions("login", "denied"))

	// Other paths pass; API keys are keys, whatever they hold.
	for _, k := range []string{toOther, toOther, toShadow} {
		r := send("GET", "/api/items", "X-Api-Key", k)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		assert.Equal(t, `"per-ip";q=100;w=60`, r.Header.Get("RateLimit-Policy"))
	}
	assert.EqualValues(t, 2, ta.KeyTotal("per-api-key", url.PathEscape(toOther)))
	assert.EqualValues(t, 1, ta.KeyTotal("per-api-key", url.PathEscape(toShadow)))
	assert.EqualValues(t, 0, ta.KeyTotal("per-api-key", "other-customer"))
	assert.EqualValues(t, 8, ta.KeyTotal("per-ip", "127.0.0.2"))
	assert.Equal(t, 8, up.Count())
}

// clientFrom2 returns a function that sends a request for app.example.com
// to addr from 127.0.0.2, the client address of the forward-auth tests.
func clientFrom2(t *testing.T, addr string) func(method, path string, hdr ...string) resp {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
	}}
	return func(method, path string, hdr ...string) resp {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(""))
		require.NoError(t, err)
		req.Host = "app.example.com"
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		res, err := c.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(res.Body)
		require.NoError(t, err)
		return resp{Status: res.StatusCode, Header: res.Header, Body: b.Bytes()}
	}
}

// assertLoginDenied checks r, the answer to a POST /login of the example
// config's spent login rule (sent with the injected headers inj), is
// geolimit's denial as the proxy passed it on.
func assertLoginDenied(t *testing.T, r resp, inj []string) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%q: %s", inj, r.Body)
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.Header.Get("Retry-After"))
	assert.Positive(t, retry)
	assert.LessOrEqual(t, retry, 120, "at most two windows")
	name, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
	assert.Equal(t, "login", name)
	assert.Equal(t, map[string]int64{"r": 0, "t": int64(retry)}, p)
	assert.Equal(t, "rate limited", r.JSON(t)["error"])
}

// nginxBinary finds nginx with the auth_request module, or skips (fails
// with GEOLIMIT_REQUIRE_NGINX=1).
func nginxBinary(t *testing.T) string {
	t.Helper()
	return proxyBinary(t, "nginx", "GEOLIMIT_NGINX", "GEOLIMIT_REQUIRE_NGINX", "/usr/sbin/nginx", func(bin string) string {
		out, err := exec.Command(bin, "-V").CombinedOutput()
		if err != nil {
			return "nginx -V failed: " + err.Error()
		}
		if !bytes.Contains(out, []byte("http_auth_request_module")) {
			return bin + " is built without ngx_http_auth_request_module"
		}
		return ""
	})
}

// proxyBinary finds the binary of a proxy for an end-to-end test: named by
// the environment variable env, else name on PATH, else fallback (when not
// empty); check returns why a binary found will not do ("" when it will).
// Without one the test skips, unless the environment variable require is
// 1 (as in CI), when it fails.
func proxyBinary(t *testing.T, name, env, require, fallback string, check func(bin string) string) string {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		if os.Getenv(require) == "1" {
			t.Fatalf("%s=1 but %s", require, why)
		}
		t.Skipf("%s: install %s (apt-get install %s) or set %s to run this end-to-end test", why, name, name, env)
	}
	bin := os.Getenv(env)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath(name); err != nil {
			if fallback == "" {
				missing("no " + name + " on PATH")
			}
			bin = fallback
		}
	}
	if _, err := os.Stat(bin); err != nil {
		missing("no " + name + " binary (" + bin + ")")
	}
	if why := check(bin); why != "" {
		missing(why)
	}
	return bin
}

// startNginx writes nginx.conf into dir (pid, logs and temp paths inside
// it) with the server block site(listen) in its http block, runs nginx in
// the foreground and returns its address once it accepts connections. It
// is stopped when the test ends.
func startNginx(t *testing.T, bin, dir string, site func(listen string) string) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		addr, inUse := tryNginx(t, bin, dir, site)
		if !inUse {
			return addr
		}
		if attempt == 3 {
			t.Fatalf("nginx: no free port after %d attempts", attempt+1)
		}
		// The free port was taken meanwhile: another one.
	}
}

func tryNginx(t *testing.T, bin, dir string, site func(listen string) string) (addr string, inUse bool) {
	t.Helper()
	userLine := ""
	if os.Geteuid() == 0 {
		// Workers would run as nobody, who cannot enter the test's
		// directory: run them as the test's own user.
		u, err := user.Current()
		require.NoError(t, err)
		userLine = "user " + u.Username + ";"
	}
	addr = freeAddr(t)
	conf := strings.NewReplacer("{dir}", dir, "{user}", userLine).Replace(`
{user}
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events { worker_connections 64; }
http {
    access_log {dir}/access.log;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include site.conf;
}
`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site(addr)), 0o644))
	var out servertest.LogBuffer
	cmd := exec.Command(bin, "-p", dir+"/", "-c", filepath.Join(dir, "nginx.conf"),
		"-e", filepath.Join(dir, "error.log"), "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = &out, &out
	p := startProc(t, cmd)
	logs := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return out.String() + string(b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if p.exited() {
			l := logs()
			if strings.Contains(l, "Address already in use") {
				return "", true
			}
			t.Fatalf("nginx exited: %v\n%s", p.err, l)
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("nginx logs:\n%s", logs())
				}
			})
			return addr, false
		}
		if time.Now().After(deadline) {
			p.stop()
			t.Fatalf("nginx did not accept connections on %s\n%s", addr, logs())
		}
		time.Sleep(10 * time.Millisecond) // a poll (by hand: it stops early when the process exits)
	}
}

// freeAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t *testing.T) string { return gossiptest.FreeAddr(t) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.WriteFile(to, []byte(readFile(t, from)), 0o644))
}

// replaceOnce replaces old, which must occur exactly once in s.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "%q must occur once", old)
	return strings.Replace(s, old, new, 1)
}
