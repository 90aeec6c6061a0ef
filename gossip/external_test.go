package gossip

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/require"
)

// TestExternalNATSServer replicates through a real nats-server process, as
// with nats.url: the binary named by GEOLIMIT_NATS_SERVER, or nats-server on
// PATH (Debian's package, or `go build github.com/nats-io/nats-server/v2`).
func TestExternalNATSServer(t *testing.T) {
	bin := os.Getenv("GEOLIMIT_NATS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("nats-server"); err != nil {
			t.Skip("no nats-server binary: set GEOLIMIT_NATS_SERVER or put nats-server on PATH")
		}
	}
	port := freePort(t)
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", hostPort(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, poll, "nats-server listening")
	url := "nats://" + hostPort(port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := identity.PoPID{Region: "eu", PoP: "ams"}, identity.PoPID{Region: "us", PoP: "iad"}
	ma := startMember(t, ctx, newNode(t, a.Region, a.PoP, "ams-1", testRules()), natsOpts(url, a, "ams-1"))
	mb := startMember(t, ctx, newNode(t, b.Region, b.PoP, "iad-1", testRules()), natsOpts(url, b, "iad-1"))
	for i := range 50 {
		m := ma
		if i%2 == 0 {
			m = mb
		}
		_, err := m.node.Decide(time.Now().UnixNano(), "api", "k", 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return total(ma.node, "api", "k") == 50 && total(mb.node, "api", "k") == 50
	}, 10*time.Second, poll, "converged through the external server")
}
