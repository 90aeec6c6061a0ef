package server

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (ta *testApp) reloads(result string) float64 {
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_config_reloads_total", "result", result)
	require.True(ta.T, ok)
	return v
}

func TestReload(t *testing.T) {
	var logs servertest.LogBuffer
	ta := startApp(t, "rules: [{name: r, limit: 3, window: 1m}, {name: gone, limit: 3, window: 1m}, {name: rewin, limit: 3, window: 1m}]\n",
		func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	for _, rule := range []string{"r", "r", "gone", "rewin"} {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"`+rule+`","key":"k"}`).Status)
	}

	// A good config: r's limit changes (counts kept), rewin's window changes
	// (counts reset), gone goes, fresh comes.
	ta.WriteConfig("rules: [{name: r, limit: 5, window: 1m}, {name: rewin, limit: 3, window: 2m}, {name: fresh, limit: 1, window: 1s}]\nlisten: {api: \"127.0.0.1:0\"}\nreplication: {flush_interval: 1s}\n")
	require.NoError(t, ta.App.Reload())
	assert.EqualValues(t, 1, ta.reloads("ok"))
	assert.EqualValues(t, 2, ta.KeyTotal("r", "k"), "counts of an unchanged rule survive")
	assert.EqualValues(t, 0, ta.KeyTotal("rewin", "k"), "a new window starts afresh")
	r := ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"r";q=5;w=60`, r.Header.Get("RateLimit-Policy"))
	assert.EqualValues(t, 2, r.JSON(t)["remaining"])
	assert.Equal(t, http.StatusNotFound, ta.Post("/v1/check", `{"rule":"gone","key":"k"}`).Status)
	assert.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"fresh","key":"k"}`).Status)
	assert.Contains(t, logs.String(), "take effect only at restart")
	assert.Contains(t, logs.String(), "replication")
	mfs := ta.Scrape()
	_, ok := servertest.MetricValue(mfs, "geolimit_decisions_total", "rule", "gone")
	assert.False(t, ok, "a removed rule's series go away")
	v, _ := servertest.MetricValue(mfs, "geolimit_decisions_total", "rule", "r", "result", "allowed")
	assert.EqualValues(t, 3, v, "a kept rule's counters continue")

	// A bad config is rejected with its reason; the old one keeps serving.
	ta.WriteConfig("rules: [{name: r, limit: 0, window: 1m}]\n")
	err := ta.App.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules[0].limit: must be at least 1")
	assert.EqualValues(t, 1, ta.reloads("failed"))
	assert.Contains(t, logs.String(), "config reload failed")
	assert.Contains(t, logs.String(), "rules[0].limit: must be at least 1")
	r = ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"r";q=5;w=60`, r.Header.Get("RateLimit-Policy"))
	assert.EqualValues(t, 4, ta.KeyTotal("r", "k"))

	ta.WriteConfig("rules: [{name: r, limit: 5, window: 1m, colour: blue}]\n")
	err = ta.App.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rules[0].colour: unknown field")
}

func TestReloadOnFileChange(t *testing.T) {
	ta := startApp(t, "rules: [{name: r, limit: 3, window: 1m}]\n", func(o *Options) { o.WatchInterval = 10 * time.Millisecond })
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)

	ta.WriteConfig("rules: [{name: r, limit: 3, window: 1m}, {name: added, limit: 1, window: 1m}]\n")
	require.Eventually(t, func() bool {
		return ta.Post("/v1/check", `{"rule":"added","key":"k"}`).Status != http.StatusNotFound
	}, wait, poll, "the new rule")
	// The rules are swapped before the reload is counted: wait for both.
	require.Eventually(t, func() bool { return ta.reloads("ok") == 1 }, wait, poll, "the reload counted")
	assert.EqualValues(t, 1, ta.KeyTotal("r", "k"))

	ta.WriteConfig("rules: [{name: r, limit: 3, window: 1m}, {name: added, limit: 1, window: 1m, scope: planet}]\n")
	require.Eventually(t, func() bool { return ta.reloads("failed") == 1 }, wait, poll, "the failed reload")
	assert.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status, "the old config keeps serving")
	assert.EqualValues(t, 1, ta.reloads("ok"))
}

// A file caught empty or truncated to no rules is refused on reload: the
// rules and their counts stay.
func TestReloadRefusesNoRules(t *testing.T) {
	ta := startApp(t, "rules: [{name: r, limit: 3, window: 1m}]\n")
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
	for _, body := range []string{"", "rules: []\n"} {
		ta.WriteConfig(body)
		require.ErrorContains(t, ta.App.Reload(), "rules: at least one rule required", "%q", body)
	}
	assert.EqualValues(t, 1, ta.KeyTotal("r", "k"))
	assert.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
}
