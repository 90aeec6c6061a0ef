// Package gossiptest provides real-network fixtures for replication tests on
// loopback: embedded nats-servers linked by gateways into a super-cluster,
// with every gateway link behind a TCP proxy that a test can cut and restore.
//
//	sc := gossiptest.StartSuperCluster(t, "eu", "us", "ap")
//	url := sc.ClientURL(0)  // connect region eu's nodes here
//	sc.Cut(2, true)          // region ap loses every gateway link
//	sc.Cut(2, false)         // and gets them back
//
// CopyExample and WriteCerts run an example directory of configs (geolimit's
// and nats-server's) on free ports with certificates made for the test:
//
//	e := gossiptest.CopyExample(t, "../examples/secure-multi-region", "examples/secure-multi-region")
//	ca := gossiptest.WriteCerts(t, filepath.Join(e.Dir, "certs"), "eu", "us", "ap")
//
// Everything listens on free ports of 127.0.0.1 and is stopped by t.Cleanup.
package gossiptest

import (
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/internal/faultproxy"
)

// poll is how often a fixture waiting for a condition checks it.
const poll = 2 * time.Millisecond

// WaitInterest waits until server s has a subscription for each of
// subjects, local or routed from another server of its cluster: core NATS
// drops a message that no subscription matches when it is published, so a
// test publishes to a node only once the node's interest has reached the
// server it publishes through. (Counting the server's subscriptions does not
// tell: its system account holds dozens of its own.)
func WaitInterest(tb testing.TB, s *server.Server, subjects ...string) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		for _, subj := range subjects {
			if !s.GlobalAccount().SubscriptionInterest(subj) {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, fmt.Sprintf("interest in %v", subjects))
}

var serial atomic.Uint64

// StartNATS starts an embedded nats-server on a free loopback port, with a
// gateway when gw is set, and shuts it down at cleanup.
func StartNATS(tb testing.TB, gw *server.GatewayOpts) *server.Server {
	tb.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, ServerName: fmt.Sprintf("s%d", serial.Add(1))}
	if gw != nil {
		opts.Gateway = *gw
	}
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("gossiptest: nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		tb.Fatal("gossiptest: nats-server not ready")
	}
	tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Proxy forwards TCP connections to a target that can be set late, and can
// be cut (every connection closed, new ones refused) and restored (package
// faultproxy). It is safe for concurrent use.
type Proxy = faultproxy.Proxy

// NewProxy listens on a free loopback port; it refuses connections until
// SetTarget. It is closed at cleanup.
func NewProxy(tb testing.TB) *Proxy {
	tb.Helper()
	p, err := faultproxy.New(faultproxy.Config{})
	if err != nil {
		tb.Fatalf("gossiptest: proxy: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// SuperCluster is one embedded nats-server per region, linked by gateways.
// Every directed gateway link i -> j goes through its own Proxy, so that a
// test can cut a region off completely, or one direction only.
type SuperCluster struct {
	Names   []string
	Servers []*server.Server
	// Links[i][j] carries region i's gateway connection to region j.
	Links [][]*Proxy
}

// StartSuperCluster starts one server per name and waits until every
// gateway is connected. It shortens the gateways' initial solicit delay for
// the whole process (server.SetGatewaysSolicitDelay).
func StartSuperCluster(tb testing.TB, names ...string) *SuperCluster {
	tb.Helper()
	server.SetGatewaysSolicitDelay(10 * time.Millisecond)
	n := len(names)
	c := &SuperCluster{Names: names, Servers: make([]*server.Server, n), Links: make([][]*Proxy, n)}
	for i := range n {
		c.Links[i] = make([]*Proxy, n)
		for j := range n {
			if i != j {
				c.Links[i][j] = NewProxy(tb)
				c.Links[i][j].SetSource(names[i])
			}
		}
	}
	for i, name := range names {
		gw := server.GatewayOpts{
			Name: name, Host: "127.0.0.1", Port: -1,
			// Servers learn a remote gateway's advertised URL; one that
			// refuses connections keeps them on the (cuttable) proxies.
			Advertise: "127.0.0.1:1",
		}
		for j, other := range names {
			if i != j {
				u, err := url.Parse("nats://" + c.Links[i][j].Addr())
				if err != nil {
					tb.Fatal(err)
				}
				gw.Gateways = append(gw.Gateways, &server.RemoteGatewayOpts{Name: other, URLs: []*url.URL{u}})
			}
		}
		c.Servers[i] = StartNATS(tb, &gw)
		for j := range n {
			if j != i {
				c.Links[j][i].SetTarget(c.Servers[i].GatewayAddr().String())
			}
		}
	}
	require.Eventually(tb, func() bool {
		for _, s := range c.Servers {
			if s.NumOutboundGateways() != n-1 {
				return false
			}
		}
		return true
	}, 30*time.Second, poll, "gateways connected")
	return c
}

// ClientURL returns region i's client URL.
func (c *SuperCluster) ClientURL(i int) string { return c.Servers[i].ClientURL() }

// Cut cuts (or restores) every gateway link to and from region i.
func (c *SuperCluster) Cut(i int, cut bool) {
	for j := range c.Names {
		if j != i {
			c.Links[i][j].SetCut(cut)
			c.Links[j][i].SetCut(cut)
		}
	}
}

// CutOneWay cuts (or restores) region from's gateway link to region to:
// messages from "from" no longer reach "to", the other way still works.
func (c *SuperCluster) CutOneWay(from, to int, cut bool) { c.Links[from][to].SetCut(cut) }
