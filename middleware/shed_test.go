package middleware_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/middleware"
)

// A Limiter sheds as the daemon does: with one request of the first class
// held in the handler, a request of the second is answered 503 before any
// rule counts it, and the first class still goes on.
func TestShedding(t *testing.T) {
	cfg := middleware.Standalone(config.Rule{Name: "all", Limit: 100, Window: config.Duration(time.Minute)})
	cfg.Shedding = config.Shedding{MaxInFlight: 2, RetryAfter: config.Duration(2 * time.Second), Classes: []config.ShedClass{
		{Name: "writes", Match: config.Match{Methods: []string{"POST"}}},
		{Name: "reads"},
	}}
	lim, err := middleware.New(cfg)
	require.NoError(t, err)
	require.NoError(t, lim.Start(context.Background()))
	t.Cleanup(func() { assert.NoError(t, lim.Close(context.Background())) })
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
	})))
	t.Cleanup(srv.Close)

	// The held request comes from another client address, of another
	// network: one address holds at most max(1, max_in_flight / 4)
	// requests in flight, one /24 at most max(max_in_flight / 2 - 1, that).
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, 2)}}).DialContext}}
	defer other.CloseIdleConnections()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if res, err := other.Post(srv.URL+"/hold", "text/plain", nil); err == nil {
			res.Body.Close()
		}
	}()
	<-entered
	res, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "2", res.Header.Get("Retry-After"))
	assert.Equal(t, "reads", body["class"])
	res, err = http.Post(srv.URL+"/", "text/plain", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "the first class is never shed")
	close(release)
	wg.Wait()
	mfs, err := lim.App().Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "geolimit_decisions_total":
				if label(m, "result") == "allowed" {
					got["allowed"] = m.GetCounter().GetValue()
				}
			case "geolimit_shed_total":
				got["shed "+label(m, "class")] = m.GetCounter().GetValue()
			}
		}
	}
	assert.Equal(t, map[string]float64{"allowed": 2, "shed writes": 0, "shed reads": 1}, got, "the shed request reached no rule")
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
