package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/middleware"
)

// served is one limiter wrapping a handler that counts its calls, behind a
// real HTTP server.
type served struct {
	lim   *middleware.Limiter
	url   string
	calls int
}

func serve(t *testing.T, cfg *config.Config) *served {
	t.Helper()
	lim, err := middleware.New(cfg)
	require.NoError(t, err)
	require.NoError(t, lim.Start(context.Background()))
	t.Cleanup(func() { assert.NoError(t, lim.Close(context.Background())) })
	s := &served{lim: lim}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls++ // the test's requests are sequential
		// The RateLimit headers are set before the handler runs.
		fmt.Fprintf(w, "ok %s", w.Header().Get("X-RateLimit-Remaining"))
	})
	srv := httptest.NewServer(lim.Handler(next))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (s *served) get(t *testing.T, path string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func rule(name, prefix string, limit uint64) config.Rule {
	return config.Rule{Name: name, Match: config.Match{PathPrefix: prefix}, Limit: limit, Window: config.Duration(time.Hour)}
}

func TestHeadersAndDenial(t *testing.T) {
	s := serve(t, middleware.Standalone(rule("api", "/api", 2)))
	a := s.get(t, "/api/x")
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, "ok 1", a.body)
	assert.Equal(t, `"api";q=2;w=3600`, a.header.Get("RateLimit-Policy"))
	assert.True(t, strings.HasPrefix(a.header.Get("RateLimit"), `"api";r=1;t=`), a.header.Get("RateLimit"))
	assert.Equal(t, "2", a.header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "1", a.header.Get("X-RateLimit-Remaining"))
	assert.NotEmpty(t, a.header.Get("X-RateLimit-Reset"))
	assert.Empty(t, a.header.Get("Retry-After"))

	require.Equal(t, http.StatusOK, s.get(t, "/api/x").status)
	d := s.get(t, "/api/x")
	require.Equal(t, http.StatusTooManyRequests, d.status)
	assert.NotEmpty(t, d.header.Get("Retry-After"))
	assert.Equal(t, "0", d.header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "application/json", d.header.Get("Content-Type"))
	var body struct {
		Error string `json:"error"`
		Rule  string `json:"rule"`
	}
	require.NoError(t, json.Unmarshal([]byte(d.body), &body))
	assert.Equal(t, "rate limited", body.Error)
	assert.Equal(t, "api", body.Rule)
	assert.Equal(t, 2, s.calls, "a denied request never reaches the handler")

	// Paths no rule matches are not limited and carry no headers.
	o := s.get(t, "/other")
	assert.Equal(t, http.StatusOK, o.status)
	assert.Empty(t, o.header.Get("RateLimit-Policy"))
}

func TestANDSpendsNothingOnDeny(t *testing.T) {
	s := serve(t, middleware.Standalone(rule("all", "/", 5), rule("login", "/login", 2)))
	for i := 0; i < 2; i++ {
		a := s.get(t, "/login")
		require.Equal(t, http.StatusOK, a.status)
		// The binding rule is the one with the least remaining.
		assert.Equal(t, fmt.Sprint(1-i), a.header.Get("X-RateLimit-Remaining"))
	}
	for i := 0; i < 3; i++ {
		d := s.get(t, "/login")
		require.Equal(t, http.StatusTooManyRequests, d.status)
		assert.Contains(t, d.body, `"rule":"login"`)
	}
	// The three denials spent nothing of "all": 5 - 2 allowed - this one.
	a := s.get(t, "/home")
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, "2", a.header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, 3, s.calls)
}

func TestShadowRule(t *testing.T) {
	sh := rule("shadow", "/", 1)
	sh.Mode = "shadow"
	s := serve(t, middleware.Standalone(sh, rule("enforced", "/", 10)))
	for i := 0; i < 5; i++ {
		a := s.get(t, "/")
		require.Equal(t, http.StatusOK, a.status, "a shadow rule never denies")
		assert.Equal(t, "10", a.header.Get("X-RateLimit-Limit"), "the headers are the enforce rule's")
	}
	app := s.lim.App()
	v, err := app.Node().View(app.Clock().Now(), "shadow", "127.0.0.1")
	require.NoError(t, err)
	assert.InDelta(t, 1, v.Estimate, 0.01, "the shadow rule counts up to its limit")
	mfs, err := app.Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "geolimit_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["rule"]+"/"+l["result"]] = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, 1.0, got["shadow/allowed"])
	assert.Equal(t, 4.0, got["shadow/shadow_denied"], "and reports the rest as shadow denials")
	assert.Equal(t, 5.0, got["enforced/allowed"])
}

func TestTrustedProxies(t *testing.T) {
	cfg := middleware.Standalone(rule("per-client", "/", 1))
	cfg.Proxy.TrustedProxies = []string{"127.0.0.1"}
	s := serve(t, cfg)
	for _, client := range []string{"203.0.113.1", "203.0.113.2"} {
		xff := []string{"X-Forwarded-For", "198.51.100.9, " + client}
		assert.Equal(t, http.StatusOK, s.get(t, "/", xff...).status, client)
		assert.Equal(t, http.StatusTooManyRequests, s.get(t, "/", xff...).status, client)
	}
	// The peer itself is a client of its own when it sends no header.
	assert.Equal(t, http.StatusOK, s.get(t, "/").status)

	// Without trusted proxies X-Forwarded-For is not believed: every
	// request counts for the socket peer.
	u := serve(t, middleware.Standalone(rule("per-client", "/", 1)))
	assert.Equal(t, http.StatusOK, u.get(t, "/", "X-Forwarded-For", "203.0.113.1").status)
	assert.Equal(t, http.StatusTooManyRequests, u.get(t, "/", "X-Forwarded-For", "203.0.113.2").status)
}

func TestAmbiguousKeyHeader(t *testing.T) {
	r := rule("per-user", "/", 5)
	r.Key = config.KeySpec{"header:X-User"}
	s := serve(t, middleware.Standalone(r))
	a := s.get(t, "/", "X-User", "alice", "X-User", "bob")
	assert.Equal(t, http.StatusBadRequest, a.status)
	assert.Contains(t, a.body, "X-User")
	b := s.get(t, "/", "X-User", "alice")
	assert.Equal(t, http.StatusOK, b.status)
	assert.Equal(t, "4", b.header.Get("X-RateLimit-Remaining"), "the refused request counted nothing")
	// Without the header the rule does not apply.
	assert.Empty(t, s.get(t, "/").header.Get("RateLimit-Policy"))
	assert.Equal(t, 2, s.calls)
}

func TestNewAppliesDefaultsAndValidates(t *testing.T) {
	cfg := middleware.Standalone(config.Rule{Name: "r", Limit: 1, Window: config.Duration(time.Minute)})
	_, err := middleware.New(cfg)
	require.NoError(t, err)
	assert.Empty(t, cfg.Rules[0].Key, "the caller's config is not modified")
	assert.Empty(t, cfg.Rules[0].Mode)

	_, err = middleware.New(middleware.Standalone(config.Rule{Name: "r", Limit: 1}))
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "rules[0]"), err.Error())
	_, err = middleware.New(nil)
	require.Error(t, err)
}

// A Limiter starts no NATS server: NATS enabled needs nats.url, and the
// error says so.
func TestNATSNeedsURL(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Rules = []config.Rule{rule("r", "/", 1)}
	_, err := middleware.New(cfg)
	require.ErrorIs(t, err, middleware.ErrNoNATSURL)
	assert.Contains(t, err.Error(), "nats.url")
	assert.Contains(t, err.Error(), "nats.disabled")
}

// Two Limiters in two PoPs linked by a NATS server share a global count.
func TestReplicationAcrossPoPs(t *testing.T) {
	ns := gossiptest.StartNATS(t, nil)
	no := false
	mk := func(pop string) *served {
		cfg := config.DefaultConfig()
		cfg.Node = config.Node{ID: "n1", Region: "eu", PoP: pop}
		cfg.NATS.URL = ns.ClientURL()
		cfg.Replication.FlushInterval = 10 * time.Millisecond
		cfg.Replication.NearLimitAllowance = &no
		cfg.Rules = []config.Rule{rule("global", "/", 4)}
		return serve(t, cfg)
	}
	a, b := mk("par"), mk("fra")
	for i := 0; i < 2; i++ {
		require.Equal(t, http.StatusOK, a.get(t, "/").status)
		require.Equal(t, http.StatusOK, b.get(t, "/").status)
	}
	for _, s := range []*served{a, b} {
		app := s.lim.App()
		require.Eventually(t, func() bool {
			v, err := app.Node().View(app.Clock().Now(), "global", "127.0.0.1")
			return err == nil && v.Estimate >= 4-0.01
		}, 10*time.Second, 2*time.Millisecond, "both PoPs' counts")
	}
	assert.Equal(t, http.StatusTooManyRequests, a.get(t, "/").status)
	assert.Equal(t, http.StatusTooManyRequests, b.get(t, "/").status)
}

// TestKillSwitchAcrossPoPs: a rule switched off through one Limiter's
// engine lets every request through on the other PoP's Limiter too.
func TestKillSwitchAcrossPoPs(t *testing.T) {
	ns := gossiptest.StartNATS(t, nil)
	mk := func(pop string) *served {
		cfg := config.DefaultConfig()
		cfg.Node = config.Node{ID: "n1", Region: "eu", PoP: pop}
		cfg.NATS.URL = ns.ClientURL()
		cfg.Rules = []config.Rule{rule("global", "/", 1)}
		return serve(t, cfg)
	}
	a, b := mk("par"), mk("fra")
	require.Equal(t, http.StatusOK, b.get(t, "/").status)
	require.Equal(t, http.StatusTooManyRequests, b.get(t, "/").status)
	_, err := a.lim.App().SetRuleMode("global", "bogus")
	require.Error(t, err)
	st, err := a.lim.App().SetRuleMode("global", "off")
	require.NoError(t, err)
	assert.Equal(t, "off", st.Mode)
	require.Eventually(t, func() bool {
		m, ok := b.lim.App().RuleMode("global")
		return ok && m.Mode == "off"
	}, 10*time.Second, 2*time.Millisecond, "the other PoP takes the mode")
	for i := 0; i < 3; i++ {
		assert.Equal(t, http.StatusOK, b.get(t, "/").status)
	}
}

func TestReloadFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	write := func(limit int) {
		y := fmt.Sprintf("nats: {disabled: true}\nrules:\n  - {name: r, limit: %d, window: 1m}\n", limit)
		require.NoError(t, os.WriteFile(path, []byte(y), 0o600))
	}
	write(5)
	cfg, err := config.Load(path)
	require.NoError(t, err)
	lim, err := middleware.NewWithOptions(cfg, middleware.Options{ConfigPath: path})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lim.Close(context.Background())) })
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	limit := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Header().Get("X-RateLimit-Limit")
	}
	assert.Equal(t, "5", limit())
	write(7)
	require.NoError(t, lim.Reload())
	assert.Equal(t, "7", limit())
}

// The listen section is not used by a Limiter: a config built in Go may
// leave it empty, or name addresses the daemon would refuse.
func TestListenSectionIgnored(t *testing.T) {
	for name, l := range map[string]config.Listen{
		"empty":                  {},
		"exposed without tokens": {API: "0.0.0.0:8080", GRPC: "0.0.0.0:8081"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := middleware.Standalone(config.Rule{Name: "r", Limit: 1, Window: config.Duration(time.Minute)})
			cfg.Listen = l
			require.Error(t, cfg.Validate(), "the daemon refuses it")
			s := serve(t, cfg)
			assert.Equal(t, http.StatusOK, s.get(t, "/").status)
			assert.Equal(t, http.StatusTooManyRequests, s.get(t, "/").status)
		})
	}
}

// Decisions are timed under their own label, not the proxy listener's.
func TestLatencyLabel(t *testing.T) {
	s := serve(t, middleware.Standalone(config.Rule{Name: "r", Limit: 5, Window: config.Duration(time.Minute)}))
	for range 3 {
		s.get(t, "/")
	}
	mfs, err := s.lim.App().Registry().Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "geolimit_decision_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "endpoint" {
					counts[lp.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	assert.Equal(t, uint64(3), counts["middleware"])
	assert.Zero(t, counts["proxy"])
}
