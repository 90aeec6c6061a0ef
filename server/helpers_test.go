package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
)

// t0 is a test time at the start of a minute (and of every shorter window
// that divides a minute).
const t0 = int64(28_333_333) * int64(time.Minute)

var testSelf = identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 7}

// baseYAML makes every listener pick a free port on 127.0.0.1.
// A test config without a listen section gets listen.api on a free port.
const baseYAML = `
node: {id: ams-1, region: eu, pop: ams}
nats: {embedded: {listen: "127.0.0.1:-1"}}
`

func withBase(yaml string) string {
	if strings.Contains(yaml, "listen:") {
		return baseYAML + yaml
	}
	return baseYAML + "listen: {api: \"127.0.0.1:0\"}\n" + yaml
}

type testApp struct {
	*App
	t    *testing.T
	clk  *clock.Manual
	path string
	api  string // http://host:port
	c    *http.Client
	// token, when set, is sent as a bearer token by requests that carry no
	// Authorization header of their own.
	token string
}

type testOpt func(*Options)

// startApp writes yaml (appended to baseYAML) to a file and starts an App
// on it with a manual clock at t0.
func startApp(t *testing.T, yaml string, opts ...testOpt) *testApp {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(withBase(yaml)), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	clk := clock.NewManual(t0)
	o := Options{Config: cfg, ConfigPath: path, Self: testSelf, Clock: clk, Version: "test",
		WatchInterval: -1, Logger: testLogger(t)}
	for _, f := range opts {
		f(&o)
	}
	app, err := New(o)
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, app.Shutdown(ctx))
	})
	return &testApp{App: app, t: t, clk: clk, path: path, api: "http://" + app.APIAddr().String(),
		c: &http.Client{Timeout: 10 * time.Second}}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body %s", r.body)
	return m
}

func (ta *testApp) do(method, url, body string, hdr ...string) resp {
	ta.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(ta.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if ta.token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+ta.token)
	}
	res, err := ta.c.Do(req)
	require.NoError(ta.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(ta.t, err)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func (ta *testApp) post(path, body string) resp { return ta.do(http.MethodPost, ta.api+path, body) }

func (ta *testApp) get(path string) resp { return ta.do(http.MethodGet, ta.api+path, "") }

// keyTotal is the key's total over its live windows, from GET /v1/keys.
func (ta *testApp) keyTotal(rule, key string) uint64 {
	ta.t.Helper()
	r := ta.get("/v1/keys/" + rule + "/" + key)
	require.Equal(ta.t, http.StatusOK, r.status, "%s", r.body)
	var v struct {
		Windows []struct {
			Total uint64 `json:"total"`
		} `json:"windows"`
	}
	require.NoError(ta.t, json.Unmarshal(r.body, &v))
	var sum uint64
	for _, w := range v.Windows {
		sum += w.Total
	}
	return sum
}

// scrape fetches and parses /metrics.
func (ta *testApp) scrape() map[string]*dto.MetricFamily {
	ta.t.Helper()
	r := ta.get("/metrics")
	require.Equal(ta.t, http.StatusOK, r.status)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	require.NoError(ta.t, err)
	return mfs
}

// metricValue returns the value of the series of family name whose labels
// include all of labels (pairs), and whether it exists.
func metricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func (ta *testApp) decisions(rule, result string) float64 {
	ta.t.Helper()
	v, ok := metricValue(ta.scrape(), "geolimit_decisions_total", "rule", rule, "result", result)
	require.True(ta.t, ok, "no geolimit_decisions_total{rule=%q,result=%q}", rule, result)
	return v
}

// writeConfig replaces the config file (baseYAML + yaml).
func (ta *testApp) writeConfig(yaml string) {
	ta.t.Helper()
	tmp := ta.path + ".tmp"
	require.NoError(ta.t, os.WriteFile(tmp, []byte(withBase(yaml)), 0o600))
	require.NoError(ta.t, os.Rename(tmp, ta.path))
}

// wait and poll bound the tests' waits for a condition (require.Eventually).
const (
	wait = 10 * time.Second
	poll = 5 * time.Millisecond
)
