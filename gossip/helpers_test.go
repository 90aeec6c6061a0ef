package gossip

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// poll is how often a test waiting for a condition checks it.
const poll = 2 * time.Millisecond

// testRules, newNode and total are gossiptest's.
func testRules() []pop.Rule { return gossiptest.Rules() }

func newNode(t testing.TB, region, popName, name string, rules []pop.Rule) *pop.Node {
	t.Helper()
	return gossiptest.NewNode(t, region, popName, name, rules)
}

func total(n *pop.Node, rule, key string) uint64 { return gossiptest.Total(n, rule, key) }

// startNATS starts an embedded nats-server on a free loopback port.
func startNATS(t testing.TB, gw *server.GatewayOpts) *server.Server {
	t.Helper()
	return gossiptest.StartNATS(t, gw)
}

// restartNATS starts a server on the same client port as the one shut down.
func restartNATS(t testing.TB, port int) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true}
	var s *server.Server
	require.Eventually(t, func() bool {
		var err error
		if s, err = server.NewServer(opts); err != nil {
			return false
		}
		go s.Start()
		if !s.ReadyForConnections(2 * time.Second) {
			s.Shutdown()
			return false
		}
		return true
	}, 10*time.Second, poll, "restarted nats-server")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func clientPort(s *server.Server) int { return s.Addr().(*net.TCPAddr).Port }

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	_, p, err := net.SplitHostPort(gossiptest.FreeAddr(t))
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

func hostPort(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }

// member is one node with its replicator.
type member struct {
	node *pop.Node
	rep  *Replicator
	id   identity.PoPID
	name string
}

func startMember(t testing.TB, ctx context.Context, n *pop.Node, opts Options) *member {
	t.Helper()
	opts.Node = n.Link()
	r, err := Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	s := n.Link().Self()
	return &member{node: n, rep: r, id: s.PoPID, name: s.Node}
}

func getenv(k string) string { return os.Getenv(k) }

// popNames returns ids as repl.Settings.ExpectedPoPs lists them.
func popNames(ids ...identity.PoPID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
