package middleware_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notLinked are what a program that uses the middleware must not link: the
// embedded nats-server, gRPC and Envoy's API (the rate limit service), and
// the daemon with its listeners and front ends. A path ending in "/" names
// every package under it.
var notLinked = []string{
	"github.com/nats-io/nats-server/",
	"google.golang.org/grpc",
	"google.golang.org/grpc/",
	"github.com/envoyproxy/go-control-plane/",
	"github.com/geolimit/geolimit/natsembed",
	"github.com/geolimit/geolimit/server",
	"github.com/geolimit/geolimit/server/api",
	"github.com/geolimit/geolimit/server/rls",
	"github.com/geolimit/geolimit/server/spoa",
}

// linked lists the packages the packages pkgs depend on (go list -deps).
func linked(t *testing.T, pkgs ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its own first in PATH
	require.NoError(t, err)
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).Output()
	require.NoError(t, err, "go list -deps %v", pkgs)
	return strings.Fields(string(out))
}

// forbidden returns the packages of deps that notLinked names.
func forbidden(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, n := range notLinked {
			if d == n || (strings.HasSuffix(n, "/") && strings.HasPrefix(d, n)) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// The middleware and the example service link neither nats-server nor
// gRPC nor the daemon's listeners; the edge daemon links them all (so the
// check can fail).
func TestLinksNoServer(t *testing.T) {
	assert.Empty(t, forbidden(linked(t, ".", "../examples/middleware")))
	edge := forbidden(linked(t, "../cmd/edge"))
	for _, want := range []string{"github.com/nats-io/nats-server/v2/server", "google.golang.org/grpc", "github.com/geolimit/geolimit/server"} {
		assert.Contains(t, edge, want)
	}
}

// maxExampleSize bounds the example service's binary as go build makes it
// (symbols and DWARF included): 20 MB. With nats-server and gRPC linked in,
// it was 45.8 MB.
const maxExampleSize = 20_000_000

// The example service (examples/middleware) builds under 20 MB.
func TestExampleSize(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "middleware")
	cmd := exec.Command(goBin, "build", "-o", bin, "../examples/middleware")
	cmd.Env = append(os.Environ(), "GOFLAGS="+withoutRace(os.Getenv("GOFLAGS")))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	fi, err := os.Stat(bin)
	require.NoError(t, err)
	t.Logf("examples/middleware: %d bytes (%.1f MB)", fi.Size(), float64(fi.Size())/1e6)
	assert.Less(t, fi.Size(), int64(maxExampleSize), "the example service grew past 20 MB: see what links what with go list -deps ./examples/middleware")
}

// withoutRace is GOFLAGS without -race: the size is that of a plain build.
func withoutRace(flags string) string {
	var keep []string
	for _, f := range strings.Fields(flags) {
		if f != "-race" && f != "--race" {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}
