package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/geolimit/geolimit/window"
)

const rulesYAML = `
rules:
  - {name: r, limit: 3, window: 1m}
  - {name: big, limit: 1000, window: 10s, cost: 2}
  - {name: shadow, limit: 1, window: 1m, mode: shadow}
`

// parseRateLimit parses `"name";r=N;t=T` (and q/w for the policy).
func parseItem(t *testing.T, s string) (string, map[string]int64) {
	t.Helper()
	m := regexp.MustCompile(`^"([^"]+)"((?:;[a-z]+=\d+)+)$`).FindStringSubmatch(s)
	require.NotNil(t, m, "not a structured-field item: %q", s)
	params := map[string]int64{}
	for _, p := range strings.Split(m[2][1:], ";") {
		kv := strings.SplitN(p, "=", 2)
		v, err := strconv.ParseInt(kv[1], 10, 64)
		require.NoError(t, err)
		params[kv[0]] = v
	}
	return m[1], params
}

func headerInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	require.Len(t, h.Values(name), 1, "header %s", name)
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	require.NoError(t, err, "header %s=%q", name, h.Get(name))
	return v
}

func TestCheckAllowThenDeny(t *testing.T) {
	ta := startApp(t, rulesYAML)
	ta.Clk.Set(t0 + int64(15*time.Second)) // a quarter into the window
	for i := 0; i < 3; i++ {
		r := ta.Post("/v1/check", `{"rule":"r","key":"203.0.113.7"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		body := r.JSON(t)
		assert.Equal(t, true, body["allowed"])
		assert.Equal(t, "r", body["rule"])
		assert.Equal(t, "203.0.113.7", body["key"])
		assert.EqualValues(t, 3, body["limit"])
		assert.EqualValues(t, 2-i, body["remaining"])
		assert.EqualValues(t, 0, body["retry_after_ms"])
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		name, p := parseItem(t, r.Header.Get("RateLimit"))
		assert.Equal(t, "r", name)
		assert.EqualValues(t, 2-i, p["r"])
		assert.Empty(t, r.Header.Get("Retry-After"), "allowed responses carry no Retry-After")
	}

	r := ta.Post("/v1/check", `{"rule":"r","key":"203.0.113.7"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	// The window maths says when a request fits again: at 15s into the
	// window, 3 counted in this window and none in the previous one.
	want := window.Decide(3, 1, 0, 3, int64(15*time.Second), int64(time.Minute))
	require.False(t, want.Allowed)
	retrySec := (want.RetryAfter + int64(time.Second) - 1) / int64(time.Second)
	assert.InDelta(t, float64(65*time.Second), float64(want.RetryAfter), float64(time.Millisecond),
		"45s to the next window, then 20s for 3*(1-f) <= 2")

	body := r.JSON(t)
	assert.Equal(t, false, body["allowed"])
	assert.EqualValues(t, 0, body["remaining"])
	assert.EqualValues(t, (want.RetryAfter+int64(time.Millisecond)-1)/int64(time.Millisecond), body["retry_after_ms"])
	assert.EqualValues(t, (want.Reset+int64(time.Millisecond)-1)/int64(time.Millisecond), body["reset_ms"])

	h := r.Header
	assert.Equal(t, retrySec, headerInt(t, h, "Retry-After"))
	assert.Equal(t, `"r";q=3;w=60`, h.Get("RateLimit-Policy"))
	name, p := parseItem(t, h.Get("RateLimit"))
	assert.Equal(t, "r", name)
	assert.Equal(t, map[string]int64{"r": 0, "t": retrySec}, p)
	assert.EqualValues(t, 3, headerInt(t, h, "X-RateLimit-Limit"))
	assert.EqualValues(t, 0, headerInt(t, h, "X-RateLimit-Remaining"))
	assert.Equal(t, retrySec, headerInt(t, h, "X-RateLimit-Reset"))

	assert.EqualValues(t, 3, ta.KeyTotal("r", "203.0.113.7"), "the denied request is not counted")

	// Once the wait is over the request fits again.
	ta.Clk.Advance(time.Duration(want.RetryAfter))
	r = ta.Post("/v1/check", `{"rule":"r","key":"203.0.113.7"}`)
	assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func TestCheckCost(t *testing.T) {
	ta := startApp(t, rulesYAML)
	r := ta.Post("/v1/check", `{"rule":"big","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, 998, r.JSON(t)["remaining"], "omitted cost is the rule's cost (2)")
	r = ta.Post("/v1/check", `{"rule":"big","key":"k","cost":10}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, 988, r.JSON(t)["remaining"])
	assert.EqualValues(t, 12, ta.KeyTotal("big", "k"))
	name, p := parseItem(t, r.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "big", name)
	assert.Equal(t, map[string]int64{"q": 1000, "w": 10}, p)
}

func TestChecksBatch(t *testing.T) {
	ta := startApp(t, rulesYAML)
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&sb, `{"rule":"r","key":"a"},`)
	}
	sb.WriteString(`{"rule":"big","key":"b\u00e9","cost":7}]}`)
	r := ta.Post("/v1/checks", sb.String())
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		Results []struct {
			Allowed      bool   `json:"allowed"`
			Rule         string `json:"rule"`
			Key          string `json:"key"`
			Limit        uint64 `json:"limit"`
			Remaining    uint64 `json:"remaining"`
			ResetMS      int64  `json:"reset_ms"`
			RetryAfterMS int64  `json:"retry_after_ms"`
		} `json:"results"`
	}
	require.NoError(t, jsonUnmarshal(r.Body, &out))
	require.Len(t, out.Results, 6)
	for i, res := range out.Results[:5] {
		assert.Equal(t, i < 3, res.Allowed, "check %d", i)
		assert.Equal(t, "r", res.Rule)
		assert.Equal(t, "a", res.Key)
		if !res.Allowed {
			assert.Positive(t, res.RetryAfterMS)
		}
	}
	last := out.Results[5]
	assert.True(t, last.Allowed)
	assert.Equal(t, "bé", last.Key)
	assert.EqualValues(t, 993, last.Remaining)
	assert.EqualValues(t, 3, ta.KeyTotal("r", "a"))
	assert.EqualValues(t, 7, ta.KeyTotal("big", "bé"))
	assert.EqualValues(t, 3, ta.Decisions("r", "allowed"))
	assert.EqualValues(t, 2, ta.Decisions("r", "denied"))

	r = ta.Post("/v1/checks", `{"checks":[]}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"results":[]}`, string(r.Body))
}

// TestBadInputs checks that every kind of bad request gets its status and a
// JSON error, and counts nothing.
func TestBadInputs(t *testing.T) {
	ta := startApp(t, rulesYAML+"limits: {max_body_bytes: 512, max_batch: 4}\n")
	tests := []struct {
		name, method, path, body string
		status                   int
		msg                      string
	}{
		{"bad JSON", "POST", "/v1/check", `{"rule":"r","key":`, 400, "bad JSON"},
		{"not an object", "POST", "/v1/check", `["r","k"]`, 400, "bad JSON"},
		{"key not a string", "POST", "/v1/check", `{"rule":"r","key":5}`, 400, "bad JSON"},
		{"trailing garbage", "POST", "/v1/check", `{"rule":"r","key":"k"}x`, 400, "bad JSON"},
		{"empty body", "POST", "/v1/check", ``, 400, "bad JSON"},
		{"missing rule", "POST", "/v1/check", `{"key":"k"}`, 400, "rule: required"},
		{"unknown rule", "POST", "/v1/check", `{"rule":"nope","key":"k"}`, 404, `unknown rule "nope"`},
		{"empty key", "POST", "/v1/check", `{"rule":"r","key":""}`, 400, "key: must not be empty"},
		{"missing key", "POST", "/v1/check", `{"rule":"r"}`, 400, "key: must not be empty"},
		{"key not UTF-8", "POST", "/v1/check", "{\"rule\":\"r\",\"key\":\"k\xff\"}", 400, "key: not valid UTF-8"},
		{"zero cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":0}`, 400, "cost: must be a positive integer"},
		{"negative cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":-2}`, 400, "cost: must be a positive integer"},
		{"fractional cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":0.5}`, 400, "cost: must be a positive integer"},
		{"string cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":"1"}`, 400, "bad JSON"},
		{"cost over limit", "POST", "/v1/check", `{"rule":"r","key":"k","cost":4}`, 400, "exceeds the rule's limit 3"},
		{"oversized body", "POST", "/v1/check", `{"rule":"r","key":"k","pad":"` + strings.Repeat("x", 600) + `"}`, 413, "request body larger than 512 bytes"},
		{"wrong method check", "GET", "/v1/check", ``, 405, "method not allowed"},
		{"wrong method checks", "PUT", "/v1/checks", `{"checks":[]}`, 405, "method not allowed"},
		{"batch bad JSON", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"}`, 400, "bad JSON"},
		{"batch one unknown rule", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"x","key":"k"}]}`, 404, `checks[1]: unknown rule "x"`},
		{"batch one empty key", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"r","key":""}]}`, 400, "checks[1]: key: must not be empty"},
		{"batch one bad cost", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"r","key":"k","cost":-1}]}`, 400, "checks[1]: cost"},
		{"batch too many", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{},{},{},{}]}`, 413, "more than 4"},
		{"batch oversized body", "POST", "/v1/checks", `{"checks":[],"pad":"` + strings.Repeat("x", 600) + `"}`, 413, "request body larger"},
		{"unknown endpoint", "GET", "/v2/check", ``, 404, "no such endpoint"},
		{"key view unknown rule", "GET", "/v1/keys/nope/k", ``, 404, "unknown rule"},
		{"key view wrong method", "POST", "/v1/keys/r/k", ``, 405, "method not allowed"},
		{"status wrong method", "DELETE", "/v1/status", ``, 405, "method not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ta.Do(tt.method, ta.API+tt.path, tt.body)
			require.Equal(t, tt.status, r.Status, "%s", r.Body)
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			msg, ok := r.JSON(t)["error"].(string)
			require.True(t, ok, "body %s", r.Body)
			assert.Contains(t, msg, tt.msg)
			if tt.status == 405 {
				assert.NotEmpty(t, r.Header.Get("Allow"))
			}
		})
	}
	assert.Zero(t, ta.KeyTotal("r", "k"), "nothing counted")
	assert.Zero(t, ta.Decisions("r", "allowed"))
	assert.Zero(t, ta.Decisions("r", "denied"))
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_store_keys")
	require.True(t, ok)
	assert.Zero(t, v, "no key created")
}

func TestKeyView(t *testing.T) {
	ta := startApp(t, rulesYAML)
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"/a/b c"}`).Status)
	ta.Clk.Advance(time.Minute + 30*time.Second)
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"/a/b c"}`).Status)

	r := ta.Get("/v1/keys/r/%2Fa%2Fb%20c")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var v struct {
		Rule     string  `json:"rule"`
		Key      string  `json:"key"`
		Limit    uint64  `json:"limit"`
		Estimate float64 `json:"estimate"`
		Windows  []struct {
			Index    int64             `json:"index"`
			Total    uint64            `json:"total"`
			Replicas map[string]uint64 `json:"replicas"`
		} `json:"windows"`
	}
	require.NoError(t, jsonUnmarshal(r.Body, &v))
	assert.Equal(t, "r", v.Rule)
	assert.Equal(t, "/a/b c", v.Key)
	assert.EqualValues(t, 3, v.Limit)
	assert.InDelta(t, 1.5, v.Estimate, 1e-9, "prev 1 * (1 - 0.5) + curr 1")
	require.Len(t, v.Windows, 2)
	w := t0 / int64(time.Minute)
	assert.Equal(t, w, v.Windows[0].Index)
	assert.Equal(t, w+1, v.Windows[1].Index)
	for _, win := range v.Windows {
		assert.EqualValues(t, 1, win.Total)
		assert.Equal(t, map[string]uint64{testSelf.String(): 1}, win.Replicas)
	}
	// Viewing counts nothing.
	r2 := ta.Get("/v1/keys/r/%2Fa%2Fb%20c")
	assert.Equal(t, string(r.Body), string(r2.Body))

	r = ta.Get("/v1/keys/r/never-seen")
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"rule":"r","key":"never-seen","limit":3,"estimate":0,"windows":[]}`, string(r.Body))
}

func TestShadowRule(t *testing.T) {
	ta := startApp(t, rulesYAML)
	for i := 0; i < 3; i++ {
		r := ta.Post("/v1/check", `{"rule":"shadow","key":"k"}`)
		require.Equal(t, http.StatusOK, r.Status, "shadow rules never deny")
		assert.Equal(t, true, r.JSON(t)["allowed"])
	}
	assert.EqualValues(t, 1, ta.Decisions("shadow", "allowed"))
	assert.EqualValues(t, 2, ta.Decisions("shadow", "shadow_denied"))
	assert.EqualValues(t, 0, ta.Decisions("shadow", "denied"))
	assert.EqualValues(t, 1, ta.KeyTotal("shadow", "k"), "what a shadow rule would deny is not counted")
}

func TestHealthStatus(t *testing.T) {
	ta := startApp(t, rulesYAML)
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
	assert.Len(t, s["rules"], 3)
	assert.Equal(t, []any{map[string]any{"name": "ams-1", "state": "alive"}}, s["members"])
	assert.Equal(t, []any{}, s["remote_pops"])
	assert.Equal(t, []any{}, s["partitions"])
}

func TestMetrics(t *testing.T) {
	ta := startApp(t, rulesYAML)
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
		{"geolimit_store_hot_keys", nil, 0},
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
	ta := startApp(t, rulesYAML+"limits: {max_keys: 64}\n")
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
	ta := startApp(t, rulesYAML, func(o *Options) {
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

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func TestChunkedBody(t *testing.T) {
	ta := startApp(t, rulesYAML+"limits: {max_body_bytes: 512}\n")
	send := func(body string) resp {
		req, err := http.NewRequest("POST", ta.API+"/v1/check", io.MultiReader(strings.NewReader(body)))
		require.NoError(t, err)
		require.EqualValues(t, 0, req.ContentLength, "sent chunked")
		res, err := ta.Client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return resp{Status: res.StatusCode, Header: res.Header, Body: b}
	}
	r := send(`{"rule":"r","key":"chunked"}`)
	assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = send(`{"rule":"r","key":"chunked","pad":"` + strings.Repeat("x", 1000) + `"}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1, ta.KeyTotal("r", "chunked"))
}

func TestRunUntilCancel(t *testing.T) {
	cfg, err := config.Parse([]byte(servertest.WithBase(rulesYAML)))
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
	ta := startApp(t, rulesYAML)
	cfg2, err := config.Parse([]byte("listen: {api: \"" + ta.App.APIAddr().String() + "\"}\nnats: {embedded: {listen: \"127.0.0.1:-1\"}}\n"))
	require.NoError(t, err)
	app, err := New(Options{Config: cfg2, Self: testSelf})
	require.NoError(t, err)
	assert.ErrorContains(t, app.Start(context.Background()), "listen.api")
}

// Keys must be valid UTF-8: "\xff" and "\xfe" would be counted as two keys
// but answered as the same U+FFFD.
func TestCheckKeyNotUTF8(t *testing.T) {
	ta := startApp(t, rulesYAML)
	for _, k := range []string{"\xff", "\xfe", "a\xc3"} {
		r := ta.Post("/v1/check", `{"rule":"r","key":"`+k+`"}`)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%q", k)
		assert.Contains(t, string(r.Body), "key: not valid UTF-8")
	}
	r := ta.Post("/v1/check", `{"rule":"r","key":"caf\u00e9"}`)
	assert.Equal(t, http.StatusOK, r.Status, "escaped non-ASCII is fine: %s", r.Body)
	r = ta.Post("/v1/check", `{"rule":"r","key":"café"}`)
	assert.Equal(t, http.StatusOK, r.Status, "raw UTF-8 too: %s", r.Body)
}

// http.max_connections caps the open connections of a listener: with two
// idle keep-alive connections open, a third client waits until one closes.
func TestMaxConnections(t *testing.T) {
	ta := startApp(t, "http: {max_connections: 2}\n"+rulesYAML)
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
	ta := startApp(t, "http: {max_connections_per_client: 2}\n"+rulesYAML)
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
