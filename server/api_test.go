package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

func TestHealthStatus(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	r := ta.Get("/healthz")
	assert.Equal(t, http.StatusOK, r.Status)
	r = ta.Get("/readyz")
	assert.Equal(t, http.StatusOK, r.Status)
	assert.True(t, ta.App.Ready())

	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
	r = ta.Get("/v1/status")
	require.Equal(t, http.StatusOK, r.Status)
	s := r.JSON(t)
	assert.Equal(t, testSelf.String(), s["replica"])
	assert.Equal(t, "eu", s["region"])
	assert.Equal(t, "ams", s["pop"])
	assert.Equal(t, true, s["ready"])
	assert.Equal(t, false, s["replication"])
	assert.EqualValues(t, 1, s["keys"])
	assert.Equal(t, ta.App.NATSURL(), s["nats_url"])
	if ta.App.nats != nil {
		assert.Equal(t, ta.App.nats.NATS().ID(), s["nats_server_id"], "the embedded server's ID, as its gateways name it")
	} else {
		assert.NotContains(t, s, "nats_server_id")
	}
	assert.Len(t, s["rules"], 3)
	assert.Equal(t, []any{map[string]any{"name": "ams-1", "state": "alive"}}, s["members"])
	assert.Equal(t, []any{}, s["remote_pops"])
	assert.Equal(t, []any{}, s["partitions"])
}

func TestMetrics(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	for i := 0; i < 5; i++ {
		ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	}
	ta.Post("/v1/check", `{"rule":"r","key":"other"}`)
	ta.Post("/v1/checks", `{"checks":[{"rule":"big","key":"x"},{"rule":"big","key":"y"}]}`)
	mfs := ta.Scrape()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"geolimit_decisions_total", []string{"rule", "r", "result", "allowed"}, 4},
		{"geolimit_decisions_total", []string{"rule", "r", "result", "denied"}, 2},
		{"geolimit_decisions_total", []string{"rule", "r", "result", "shadow_denied"}, 0},
		{"geolimit_decisions_total", []string{"rule", "big", "result", "allowed"}, 2},
		{"geolimit_active_keys", []string{"rule", "r"}, 2},
		{"geolimit_active_keys", []string{"rule", "big"}, 2},
		{"geolimit_active_keys", []string{"rule", "shadow"}, 0},
		{"geolimit_store_keys", nil, 4},
		{"geolimit_store_untracked_keys_total", nil, 0},
		{"geolimit_store_evicted_keys_total", nil, 0},
		{"geolimit_store_hot_keys", nil, 1}, // the key denied twice: its denials are counted
		{"geolimit_allowance_replicas", []string{"scope", "global"}, 0},
		{"geolimit_allowance_horizon_seconds", []string{"scope", "pop"}, 0},
		{"geolimit_decision_duration_seconds", []string{"endpoint", "checks"}, 1},
		{"geolimit_config_reloads_total", []string{"result", "ok"}, 0},
		{"geolimit_config_reloads_total", []string{"result", "failed"}, 0},
		{"geolimit_build_info", []string{"version", "test", "region", "eu", "pop", "ams", "node", "ams-1"}, 1},
	} {
		v, ok := servertest.MetricValue(mfs, c.name, c.labels...)
		if assert.True(t, ok, "%s%v missing", c.name, c.labels) {
			assert.Equal(t, c.want, v, "%s%v", c.name, c.labels)
		}
	}
	n, ok := servertest.MetricValue(mfs, "geolimit_decision_duration_seconds", "endpoint", "check")
	require.True(t, ok)
	assert.LessOrEqual(t, n, 6.0, "/v1/check latency is sampled")
	assert.Contains(t, mfs, "go_goroutines", "own registry carries the Go collector")
}

func TestEvictionMetrics(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML+"limits: {max_keys: 64}\n")
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := 0; i < 500; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"rule":"big","key":"k%d"}`, i)
	}
	sb.WriteString(`]}`)
	r := ta.Post("/v1/checks", sb.String())
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	mfs := ta.Scrape()
	ev, ok1 := servertest.MetricValue(mfs, "geolimit_store_evicted_keys_total")
	un, ok2 := servertest.MetricValue(mfs, "geolimit_store_untracked_keys_total")
	keys, ok3 := servertest.MetricValue(mfs, "geolimit_store_keys")
	require.True(t, ok1 && ok2 && ok3)
	assert.Positive(t, ev+un, "500 keys into a store of 64 evict or leave keys untracked")
	assert.Less(t, keys, 500.0)
}

func TestReplicatorHook(t *testing.T) {
	fr := &fakeReplicator{status: ReplicationStatus{
		Members:    []Member{{Name: "ams-1", State: "alive"}, {Name: "ams-2", Addr: "127.0.0.1:1", State: "suspect"}},
		RemotePoPs: []RemotePoP{{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, LastHeardMS: 3000, Partitioned: true}},
		Partitions: []string{"us/iad"},
	}}
	var env ReplicationEnv
	ta := startApp(t, servertest.RulesYAML, func(o *Options) {
		o.NewReplicator = func(e ReplicationEnv) (Replicator, error) {
			env = e
			return fr, nil
		}
	})
	assert.True(t, fr.started.Load())
	assert.Same(t, ta.App.Node(), env.Node)
	assert.Equal(t, ta.App.NATSURL(), env.NATSURL)
	assert.NotNil(t, env.NATS)
	assert.NotNil(t, env.Registry)
	r := ta.Get("/v1/status")
	// The identity fields' names and order are a contract with users.
	assert.Regexp(t, `^\{"replica":"[^"]+","node":"[^"]+","region":"[^"]+","pop":"[^"]+","incarnation":\d+,`, string(r.Body))
	assert.Contains(t, string(r.Body), `"remote_pops":[{"region":"us","pop":"iad","last_heard_ms":3000,"partitioned":true,"expected":false}]`)
	s := r.JSON(t)
	assert.Equal(t, true, s["replication"])
	assert.Equal(t, []any{"us/iad"}, s["partitions"])
	assert.Len(t, s["members"], 2)
	require.NoError(t, ta.App.Shutdown(t.Context()))
	assert.True(t, fr.closed.Load())
	assert.False(t, ta.App.Ready())
}

type fakeReplicator struct {
	started, closed atomic.Bool
	status          ReplicationStatus
}

func (f *fakeReplicator) Start(ctx context.Context) error { f.started.Store(true); return nil }
func (f *fakeReplicator) Status() ReplicationStatus       { return f.status }
func (f *fakeReplicator) Close() error                    { f.closed.Store(true); return nil }

var _ Replicator = (*fakeReplicator)(nil)

func TestRunUntilCancel(t *testing.T) {
	cfg, err := config.Parse([]byte(servertest.WithBase(servertest.RulesYAML)))
	require.NoError(t, err)
	app, err := New(Options{Config: cfg, Self: testSelf})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	require.Eventually(t, app.Ready, wait, poll, "ready")
	res, err := http.Get("http://" + app.APIAddr().String() + "/readyz")
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	cancel()
	require.NoError(t, <-done)
	assert.False(t, app.Ready())
}

func TestNewErrors(t *testing.T) {
	_, err := New(Options{})
	assert.ErrorContains(t, err, "config required")
	cfg := config.Demo()
	_, err = New(Options{Config: cfg})
	assert.ErrorContains(t, err, "self")
	cfg.Rules[0].Limit = 0
	_, err = New(Options{Config: cfg, Self: testSelf})
	assert.ErrorContains(t, err, "rules[0].limit")

	// A listener that cannot bind fails Start and releases everything.
	ta := startApp(t, servertest.RulesYAML)
	cfg2, err := config.Parse([]byte("listen: {api: \"" + ta.App.APIAddr().String() + "\"}\nnats: {embedded: {listen: \"127.0.0.1:-1\"}}\n"))
	require.NoError(t, err)
	app, err := New(Options{Config: cfg2, Self: testSelf})
	require.NoError(t, err)
	assert.ErrorContains(t, app.Start(context.Background()), "listen.api")
}

// http.max_connections caps the open connections of a listener: with two
// idle keep-alive connections open, a third client waits until one closes.
func TestMaxConnections(t *testing.T) {
	ta := startApp(t, "http: {max_connections: 2}\n"+servertest.RulesYAML)
	addr := ta.App.APIAddr().String()
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		// One request each, so the connection is accepted and then idle.
		_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		res.Body.Close()
		idle = append(idle, c)
	}
	done := make(chan int, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		res, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("a third connection was served (%d) while two were open", code)
	case <-time.After(300 * time.Millisecond):
	}
	idle[0].Close()
	select {
	case code := <-done:
		assert.Equal(t, http.StatusOK, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the third client was not served after a connection closed")
	}
}

// http.max_connections_per_client caps one address's open connections:
// with two stalled requests from 127.0.0.1 open, a third connection from
// it is closed at once, while another address (127.0.0.2) is served.
func TestMaxConnectionsPerClient(t *testing.T) {
	ta := startApp(t, "http: {max_connections_per_client: 2}\n"+servertest.RulesYAML)
	// The test's own requests come from another address.
	ta.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	addr := ta.App.APIAddr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for range 2 { // stalled: a body announced and never sent
		c := dial()
		_, err := fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
		require.NoError(t, err)
	}
	refused := func() float64 {
		v, _ := servertest.MetricValue(ta.Scrape(), "geolimit_connections_refused_total")
		return v
	}
	require.Eventually(t, func() bool {
		// The stalled two may not be accepted yet: then this one is, and
		// is closed by the cleanup; poll until one is refused.
		c := dial()
		_, _ = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := http.ReadResponse(bufio.NewReader(c), nil)
		return err != nil && refused() >= 1
	}, 10*time.Second, 10*time.Millisecond, "a third connection from the same address is closed")
	assert.Equal(t, http.StatusOK, ta.Get("/healthz").Status, "another address is served")
}
