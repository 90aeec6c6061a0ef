package server

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/require"
)

// TestStalledConnectionsFlood is a load test, run on request:
//
//	GEOLIMIT_FLOOD_CONNS=10000 go test ./server -run TestStalledConnectionsFlood -v
//
// One address (127.0.0.1) opens that many connections to the API, each
// with a request whose body never comes; another (127.0.0.2) then times
// 2 000 POST /v1/check and the test reports their p50 and p99, and fails
// when the p99 is over 50 ms. With http.max_connections_per_client (1000 by
// default) the flood holds 1000 connections and the rest are closed at
// once; GEOLIMIT_FLOOD_PER_CLIENT=100000 runs it as without the cap, when
// the flood holds every slot of http.max_connections.
func TestStalledConnectionsFlood(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GEOLIMIT_FLOOD_CONNS"))
	if n <= 0 {
		t.Skip("a load test: set GEOLIMIT_FLOOD_CONNS=10000 to run it")
	}
	yaml := servertest.RulesYAML
	if pc := os.Getenv("GEOLIMIT_FLOOD_PER_CLIENT"); pc != "" { // e.g. 100000: as without the cap
		yaml = "http: {max_connections_per_client: " + pc + "}\n" + yaml
	}
	ta := startApp(t, yaml)
	addr := ta.App.APIAddr().String()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Logf("dial %d: %v", len(conns), err)
			break
		}
		conns = append(conns, c)
		_, _ = fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:         (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext,
		MaxIdleConnsPerHost: 4,
	}}
	var lat []time.Duration
	for i := range 2000 {
		body := `{"rule":"r","key":"k` + strconv.Itoa(i%50) + `"}`
		start := time.Now()
		res, err := client.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		res.Body.Close()
		lat = append(lat, time.Since(start))
	}
	ta.Client = client // the test's own requests come from the other address
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	v, _ := servertest.MetricValue(ta.Scrape(), "geolimit_connections_refused_total")
	t.Logf("%d stalled connections from one address (%v refused at once): another address's /v1/check p50 %v, p99 %v",
		len(conns), v, p50.Round(time.Microsecond), p99.Round(time.Microsecond))
	require.Less(t, p99, 50*time.Millisecond)
}
