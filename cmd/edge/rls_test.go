package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const rlsConfig = `
node: {id: n1, region: eu, pop: ams}
listen: {api: "127.0.0.1:0", grpc: "127.0.0.1:0"}
nats: {embedded: {listen: "127.0.0.1:-1"}}
rules:
  - {name: per-ip, limit: 3, window: 1h}
  - {name: per-user, limit: 2, window: 1h}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [remote_address], rule: per-ip}
        - {entries: [generic_key=api, user_id], rule: per-user}
`

// rlsClientBin is envoyproxy/ratelimit's client_cmd: the binary named by
// GEOLIMIT_RLS_CLIENT, or client_cmd on PATH (.ci/run installs it with go
// install at a pinned version).
func rlsClientBin(t *testing.T) string {
	if bin := os.Getenv("GEOLIMIT_RLS_CLIENT"); bin != "" {
		return bin
	}
	bin, err := exec.LookPath("client_cmd")
	if err != nil {
		t.Skip("no client_cmd binary (envoyproxy/ratelimit's RLS client): set GEOLIMIT_RLS_CLIENT or put client_cmd on PATH; " +
			".ci/run installs it with: go install github.com/envoyproxy/ratelimit/src/client_cmd@<version>")
	}
	return bin
}

var overallCode = regexp.MustCompile(`overall_code:\s*([A-Z_]+)`)

// TestRLSClientCmd runs a real daemon and asks it with a client written for
// envoyproxy/ratelimit: OK up to the configured limit, then OVER_LIMIT.
func TestRLSClientCmd(t *testing.T) {
	bin := rlsClientBin(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", writeFile(t, rlsConfig), "-watch-interval", "0"}, &out, &errb)
	}()
	addr := waitOutput(t, &out, `rate limit service \(gRPC\) listening on (\S+)`, "the gRPC listener")

	ask := func(descriptors ...string) string {
		t.Helper()
		args := []string{"-dial_string", addr, "-domain", "edge"}
		for _, d := range descriptors {
			args = append(args, "-descriptors", d)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		b, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
		require.NoError(t, err, "client_cmd: %s", b)
		m := overallCode.FindStringSubmatch(string(b))
		require.NotNil(t, m, "no overall_code in client_cmd output: %s", b)
		return m[1]
	}
	for i := 1; i <= 3; i++ {
		assert.Equal(t, "OK", ask("remote_address=203.0.113.7"), "request %d of the limit 3", i)
	}
	assert.Equal(t, "OVER_LIMIT", ask("remote_address=203.0.113.7"), "request 4 of the limit 3")
	assert.Equal(t, "OK", ask("remote_address=203.0.113.8"), "another key")

	// Two descriptors, one a composite key: ANDed; the denied request spends
	// nothing on the other one.
	assert.Equal(t, "OK", ask("generic_key=api,user_id=u1", "remote_address=198.51.100.1"))
	assert.Equal(t, "OK", ask("generic_key=api,user_id=u1", "remote_address=198.51.100.1"))
	assert.Equal(t, "OVER_LIMIT", ask("generic_key=api,user_id=u1", "remote_address=198.51.100.1"))
	assert.Equal(t, "OK", ask("remote_address=198.51.100.1"), "the denied request spent nothing on per-ip: its third unit is left")
	assert.Equal(t, "OVER_LIMIT", ask("remote_address=198.51.100.1"))
	// A domain the config does not know is not limited.
	assert.Equal(t, "OK", strings.TrimSpace(func() string {
		b, err := exec.Command(bin, "-dial_string", addr, "-domain", "elsewhere", "-descriptors", "remote_address=203.0.113.7").CombinedOutput()
		require.NoError(t, err, "%s", b)
		return overallCode.FindStringSubmatch(string(b))[1]
	}()))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
