package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// poll is how often a test waiting for a condition checks it.
const poll = 5 * time.Millisecond

const testConfig = `
node: {id: n1, region: eu, pop: ams}
listen: {api: "127.0.0.1:0"}
nats: {embedded: {listen: "127.0.0.1:-1"}}
rules:
  - {name: demo, limit: 2, window: 1m}
`

// waitOutput waits until out holds a line matching pattern and returns the
// pattern's first group (an address the daemon printed).
func waitOutput(t *testing.T, out *syncBuffer, pattern, what string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var got string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			got = m[1]
		}
		return m != nil
	}, 10*time.Second, poll, what)
	return got
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestCheckConfig(t *testing.T) {
	var out, errb bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-config", writeFile(t, testConfig), "-check-config"}, &out, &errb))
	assert.Equal(t, "config ok: 1 rules\n", out.String())

	err := run(t.Context(), []string{"-config", writeFile(t, testConfig+"bogus: 1\n"), "-check-config"}, &out, &errb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bogus: unknown field")

	var demo bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-check-config"}, &demo, io.Discard), "the demo config is valid")
	assert.NotContains(t, demo.String(), "warning", "and has no surprise")

	// A valid config whose windows are too short for the skew it tolerates
	// passes, with a warning naming the fields.
	out.Reset()
	short := "rules: [{name: fast, limit: 5, window: 1s}]\n"
	require.NoError(t, run(t.Context(), []string{"-config", writeFile(t, short), "-check-config"}, &out, &errb))
	assert.Contains(t, out.String(), "config ok: 1 rules\nwarning: rules[0] (fast): window 1s is less than twice limits.max_skew (2s)")

	assert.Error(t, run(t.Context(), []string{"-log-level", "loud"}, io.Discard, io.Discard))
	assert.Error(t, run(t.Context(), []string{"-nope"}, io.Discard, io.Discard))
	assert.Error(t, run(t.Context(), []string{"extra"}, io.Discard, io.Discard))
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestRun starts the daemon through run, decides, reloads on SIGHUP and
// shuts down on cancel.
func TestRun(t *testing.T) {
	path := writeFile(t, testConfig)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", path, "-watch-interval", "0", "-log-level", "debug"}, &out, &errb)
	}()

	api := waitOutput(t, &out, `api listening on (http://\S+)`, "the api listener")
	for i := 0; i < 2; i++ {
		code, body := post(t, api+"/v1/check", `{"rule":"demo","key":"k"}`)
		require.Equal(t, http.StatusOK, code, body)
	}
	code, _ := post(t, api+"/v1/check", `{"rule":"demo","key":"k"}`)
	assert.Equal(t, http.StatusTooManyRequests, code)

	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(testConfig, "limit: 2", "limit: 5", 1)), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(errb.String(), "config reloaded") }, 10*time.Second, poll, "the reload")
	code, body := post(t, api+"/v1/check", `{"rule":"demo","key":"k"}`)
	assert.Equal(t, http.StatusOK, code, "limit raised, counts kept: %s", body)
	assert.Contains(t, body, `"remaining":2`)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	assert.Contains(t, errb.String(), "edge stopped")
}

func TestBareBaseline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-bare-baseline", "-bare-listen", "127.0.0.1:0"}, &out, io.Discard) }()
	url := waitOutput(t, &out, `listening on (http://\S+)`, "the listener")
	code, body := post(t, url+"/v1/check", `{"rule":"demo","key":"k"}`)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, string(bareBody), body)
	cancel()
	require.NoError(t, <-done)
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(out.String())
	for _, want := range []string{"edge ", " commit ", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(line, want) {
			t.Errorf("-version printed %q, want it to contain %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("-version printed more than one line: %q", line)
	}
}

// With nats.disabled the node runs alone: no embedded server (a nats-server
// already on the default port does not matter), decisions work, and
// replication reports no transport.
func TestRunWithoutNATS(t *testing.T) {
	// Something already listens where the embedded server would.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	path := writeFile(t, strings.Replace(testConfig, `nats: {embedded: {listen: "127.0.0.1:-1"}}`,
		`nats: {disabled: true, embedded: {listen: "`+l.Addr().String()+`"}}`, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-config", path, "-watch-interval", "0"}, &out, &errb) }()
	api := waitOutput(t, &out, `api listening on (http://\S+)`, "the api listener")
	code, body := post(t, api+"/v1/check", `{"rule":"demo","key":"k"}`)
	require.Equal(t, http.StatusOK, code, body)
	res, err := http.Get(api + "/v1/status")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(b), `"nats_url":""`)
	assert.NotContains(t, out.String(), "nats on")
	cancel()
	require.NoError(t, <-done)

	_, err = config.Parse([]byte("nats: {disabled: true, url: nats://127.0.0.1:4222}"))
	require.ErrorContains(t, err, "nats.url: set while nats.disabled is true")
}
