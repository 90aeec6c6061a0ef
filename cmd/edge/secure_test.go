package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// TestSecureMultiRegionExample runs the shipped examples/secure-multi-region
// (ports rewritten to free ones, certificates made by the test): three
// regions whose embedded nats-servers are configured by their
// nats.embedded.config_file (per-PoP users and permissions, gateway
// authorization and mutual TLS), a second PoP of region eu that reaches eu's
// server over TLS, and nodes that authenticate as their PoP. Global counts
// converge everywhere; eu's client port refuses a client without
// credentials; a restarted region is heard again and learns every count,
// its former incarnation's included.
func TestSecureMultiRegionExample(t *testing.T) {
	const rel = "examples/secure-multi-region"
	e := gossiptest.CopyExample(t, filepath.Join("..", "..", rel), rel)
	ca := gossiptest.WriteCerts(t, filepath.Join(e.Dir, "certs"), "eu", "us", "ap")
	var ds []*daemon
	// The nodes that run their region's server first; fra-1 uses eu's.
	files := []string{"eu-ams-1.yaml", "us-iad-1.yaml", "ap-sin-1.yaml", "eu-fra-1.yaml"}
	for _, f := range files {
		ds = append(ds, startDaemon(t, e.Path(f)))
	}
	defer func() {
		for _, d := range ds {
			d.stop(t)
		}
	}()
	partitions := func(d *daemon) []string {
		var st struct {
			RemotePoPs []struct{} `json:"remote_pops"`
			Partitions []string   `json:"partitions"`
		}
		getJSON(t, d.api+"/v1/status", &st)
		if len(st.RemotePoPs) != 3 {
			return []string{"not every PoP known yet"}
		}
		return st.Partitions
	}
	require.Eventually(t, func() bool {
		for _, d := range ds {
			if len(partitions(d)) != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "every PoP hears the others")
	const key = "198.51.100.7"
	for i := range 20 {
		code, body := post(t, ds[i%len(ds)].api+"/v1/check", `{"rule":"api","key":"`+key+`"}`)
		require.Equal(t, http.StatusOK, code, body)
	}
	converged := func() bool {
		for _, d := range ds {
			if keyTotal(t, d.api, "api", key) != 20 {
				return false
			}
		}
		return true
	}
	require.Eventually(t, converged, 10*time.Second, poll, "global counts converge in every region")

	// eu's client port: TLS, and only the PoPs' users.
	euURL := "tls://" + e.Addr(t, "127.0.0.1:4222")
	_, err := nats.Connect(euURL, nats.RootCAs(ca), nats.Timeout(5*time.Second))
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(err.Error()), "authorization violation")
	nc, err := nats.Connect(euURL, nats.RootCAs(ca), nats.UserInfo("eu-fra", "eu-fra-example-password"))
	require.NoError(t, err)
	nc.Close()

	// Restart us/iad's only node (and with it region us's server): it is
	// heard again and learns every count, its own former ones relayed back
	// by the other PoPs on their state subjects.
	ds[1].stop(t)
	ds[1] = startDaemon(t, e.Path("us-iad-1.yaml"))
	require.Eventually(t, func() bool { return len(partitions(ds[0])) == 0 && len(partitions(ds[1])) == 0 }, 10*time.Second, poll, "us/iad heard again")
	require.Eventually(t, converged, 10*time.Second, poll, "the restarted region learns every count")
	for _, d := range ds {
		assert.NotContains(t, strings.ToLower(d.errb.String()), "violation")
	}
}
