// Package servertest runs the edge daemon for the tests of the daemon and
// of its front ends: a config written to a file, a manual clock, listeners
// on free ports of 127.0.0.1, and the clients the tests speak to it with
// (HTTP, /metrics, the rate limit service).
//
//	a := servertest.Start(t, "rules: [{name: api, limit: 3, window: 1m}]\n", newApp)
//	r := a.Post("/v1/check", `{"rule":"api","key":"k"}`)
//	a.Clk.Advance(time.Minute)
//
// It is the one place these helpers live: the daemon's tests (package
// server) and each front end's (server/rls, ...) use it. It does not import
// package server, whose own tests use it: a test package passes the
// function that builds its daemon (NewApp).
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
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

// T0 is a test time at the start of a minute (and of every shorter window
// that divides a minute).
const T0 = int64(28_333_333) * int64(time.Minute)

// Self is the tested node's replica.
var Self = identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 7}

// BaseYAML makes every listener pick a free port on 127.0.0.1.
const BaseYAML = `
node: {id: ams-1, region: eu, pop: ams}
nats: {embedded: {listen: "127.0.0.1:-1"}}
`

// WithBase returns BaseYAML and yaml; a config without a listen section
// gets listen.api on a free port.
func WithBase(yaml string) string {
	if strings.Contains(yaml, "listen:") {
		return BaseYAML + yaml
	}
	return BaseYAML + "listen: {api: \"127.0.0.1:0\"}\n" + yaml
}

// RulesYAML is a config of three rules: r (3 a minute), big (1000 per
// 10 s, cost 2) and shadow (1 a minute, shadow mode).
const RulesYAML = `
rules:
  - {name: r, limit: 3, window: 1m}
  - {name: big, limit: 1000, window: 10s, cost: 2}
  - {name: shadow, limit: 1, window: 1m, mode: shadow}
`

// Wait and Poll bound the tests' waits for a condition (require.Eventually).
const (
	Wait = 10 * time.Second
	Poll = 5 * time.Millisecond
)

// Daemon is what the harness needs of the daemon (server.App).
type Daemon interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
	APIAddr() net.Addr
	ProxyAddr() net.Addr
	ForwardAuthAddr() net.Addr
}

// Setup is what a test's daemon is built from: its config, read from
// Path, a manual clock at T0, Self and a logger.
type Setup struct {
	Config *config.Config
	Path   string
	Clock  *clock.Manual
	Self   identity.Replica
	Logger *slog.Logger
}

// Harness is a started daemon (App) and what the tests speak to it with.
type Harness[D Daemon] struct {
	App  D
	T    *testing.T
	Clk  *clock.Manual
	Path string // the config file
	API  string // http://host:port
	// Client sends the HTTP requests.
	Client *http.Client
	// Token, when set, is sent as a bearer token by requests that carry
	// no Authorization header of their own.
	Token string
}

// Start writes yaml (appended to BaseYAML) to a file, builds a daemon on it
// with newApp and starts it; it shuts down when the test ends.
func Start[D Daemon](t *testing.T, yaml string, newApp func(Setup) (D, error)) *Harness[D] {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(WithBase(yaml)), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	clk := clock.NewManual(T0)
	app, err := newApp(Setup{Config: cfg, Path: path, Clock: clk, Self: Self, Logger: Logger(t)})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, app.Shutdown(ctx))
	})
	return &Harness[D]{App: app, T: t, Clk: clk, Path: path, API: "http://" + app.APIAddr().String(),
		Client: &http.Client{Timeout: 10 * time.Second}}
}

// Logger logs at debug level to stderr under -v, else nowhere.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Resp is an HTTP answer, read whole.
type Resp struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object.
func (r Resp) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body %s", r.Body)
	return m
}

// Do sends a request to url with body and the header pairs hdr ("Host"
// sets the request's host).
func (a *Harness[D]) Do(method, url, body string, hdr ...string) Resp {
	a.T.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(a.T, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if a.Token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	res, err := a.Client.Do(req)
	require.NoError(a.T, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(a.T, err)
	return Resp{Status: res.StatusCode, Header: res.Header, Body: b}
}

// Post posts body to path of the API listener.
func (a *Harness[D]) Post(path, body string) Resp { return a.Do(http.MethodPost, a.API+path, body) }

// Get gets path of the API listener.
func (a *Harness[D]) Get(path string) Resp { return a.Do(http.MethodGet, a.API+path, "") }

// KeyTotal is the key's total over its live windows, from GET /v1/keys.
func (a *Harness[D]) KeyTotal(rule, key string) uint64 {
	a.T.Helper()
	r := a.Get("/v1/keys/" + rule + "/" + key)
	require.Equal(a.T, http.StatusOK, r.Status, "%s", r.Body)
	var v struct {
		Windows []struct {
			Total uint64 `json:"total"`
		} `json:"windows"`
	}
	require.NoError(a.T, json.Unmarshal(r.Body, &v))
	var sum uint64
	for _, w := range v.Windows {
		sum += w.Total
	}
	return sum
}

// Scrape fetches and parses /metrics.
func (a *Harness[D]) Scrape() map[string]*dto.MetricFamily {
	a.T.Helper()
	r := a.Get("/metrics")
	require.Equal(a.T, http.StatusOK, r.Status)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	require.NoError(a.T, err)
	return mfs
}

// MetricValue returns the value of the series of family name whose labels
// include all of labels (pairs), and whether it exists.
func MetricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
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

// Decisions is geolimit_decisions_total of rule and result.
func (a *Harness[D]) Decisions(rule, result string) float64 {
	a.T.Helper()
	v, ok := MetricValue(a.Scrape(), "geolimit_decisions_total", "rule", rule, "result", result)
	require.True(a.T, ok, "no geolimit_decisions_total{rule=%q,result=%q}", rule, result)
	return v
}

// WriteConfig replaces the config file (BaseYAML + yaml).
func (a *Harness[D]) WriteConfig(yaml string) {
	a.T.Helper()
	tmp := a.Path + ".tmp"
	require.NoError(a.T, os.WriteFile(tmp, []byte(WithBase(yaml)), 0o600))
	require.NoError(a.T, os.Rename(tmp, a.Path))
}

// WriteTokens writes an API token file in dir (replacing it atomically)
// and returns its path.
func WriteTokens(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "api-token")
	require.NoError(t, os.WriteFile(p+".tmp", []byte(body), 0o600))
	require.NoError(t, os.Rename(p+".tmp", p))
	return p
}

// API tokens for WriteTokens' files.
const (
	Token1 = "dG9rZW4tb25lLTAxMjM0NTY3ODlhYmNkZWY="
	Token2 = "dG9rZW4tdHdvLTAxMjM0NTY3ODlhYmNkZWY="
	Token3 = "0123456789abcdef0123456789abcdef"
)
