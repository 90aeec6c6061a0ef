package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUIFilesOpenDataNot: with api.token_file the page's files are served
// without a token (they hold no node data, and a strict Content Security
// Policy), while what the page reads needs one.
func TestUIFilesOpenDataNot(t *testing.T) {
	tokFile := servertest.WriteTokens(t, t.TempDir(), servertest.Token1+"\n")
	ta := startApp(t, servertest.RulesYAML+"api: {token_file: "+tokFile+"}\n")

	for path, typ := range map[string]string{"/ui": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		r := ta.Get(path)
		require.Equal(t, http.StatusOK, r.Status, path)
		assert.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), typ), "%s: %s", path, r.Header.Get("Content-Type"))
		assert.Contains(t, r.Header.Get("Content-Security-Policy"), "default-src 'none'", path)
		assert.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"), path)
	}
	assert.Contains(t, string(ta.Get("/ui").Body), `<script src="/ui/app.js"`)
	assert.Equal(t, http.StatusUnauthorized, ta.Get("/ui/nothing.js").Status, "only the page's files are open")
	assert.Equal(t, http.StatusNotFound, ta.status(http.MethodGet, "/ui/nothing.js", bearer(servertest.Token1)...))
	assert.Equal(t, http.StatusMethodNotAllowed, ta.status(http.MethodPost, "/ui"))

	for _, path := range []string{"/v1/status", "/v1/activity", "/v1/hotkeys"} {
		assert.Equal(t, http.StatusUnauthorized, ta.status(http.MethodGet, path), path)
		assert.Equal(t, http.StatusOK, ta.status(http.MethodGet, path, bearer(servertest.Token1)...), path)
	}
	assert.Equal(t, http.StatusUnauthorized, ta.Do(http.MethodPut, ta.API+"/v1/rules/r/mode", `{"mode":"off"}`).Status)
	assert.Equal(t, "enforce", func() string {
		ta.Token = servertest.Token1
		defer func() { ta.Token = "" }()
		return ta.modeOf("r").Mode
	}())
}

// TestUIAssetsSmall: the page's embedded files stay under 200 KB.
func TestUIAssetsSmall(t *testing.T) {
	total := 0
	for _, f := range uiFiles {
		total += len(f.body)
	}
	t.Logf("the status page's embedded files: %d bytes (%.1f KB)", total, float64(total)/1024)
	assert.Less(t, total, 200<<10)
	assert.Len(t, uiFiles, 3)
}

// TestHotKeys: GET /v1/hotkeys lists every rule, and per rule its keys
// nearest their limits first, without counting anything.
func TestHotKeys(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	for i, key := range []string{"a", "b", "b", "c", "c", "c"} {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"`+key+`"}`).Status, i)
	}
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"big","key":"x"}`).Status)
	var hk HotKeys
	r := ta.Get("/v1/hotkeys")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NoError(t, json.Unmarshal(r.Body, &hk))
	assert.Equal(t, []HotKey{{Key: "c", Estimate: 3, Limit: 3}, {Key: "b", Estimate: 2, Limit: 3}, {Key: "a", Estimate: 1, Limit: 3}}, hk.Rules["r"])
	assert.Equal(t, []HotKey{{Key: "x", Estimate: 2, Limit: 1000}}, hk.Rules["big"])
	assert.Equal(t, []HotKey{}, hk.Rules["shadow"])
	assert.Equal(t, 4, hk.Scanned)
	assert.False(t, hk.Truncated)
	assert.Equal(t, uint64(3), ta.KeyTotal("r", "c"), "listing counts nothing")
}

// TestHotKeysBounded: a node holding more keys than one listing looks at
// lists some of them, at most hotKeysPerRule per rule, and says so.
func TestHotKeysBounded(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	var b strings.Builder
	for i := range hotKeysScan + 10 {
		b.Reset()
		fmt.Fprintf(&b, `{"rule":"big","key":"k%d"}`, i)
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", b.String()).Status)
	}
	hk := ta.App.hotKeys(ta.Clk.Now())
	assert.True(t, hk.Truncated)
	assert.Equal(t, hotKeysScan, hk.Scanned)
	assert.Len(t, hk.Rules["big"], hotKeysPerRule)
}

// TestActivityRing: the ring records the increase of every counter per
// interval, oldest first, holds at most activitySlots samples, and counts
// a counter that went down (a rule removed) as 0.
func TestActivityRing(t *testing.T) {
	var r activityRing
	assert.Empty(t, r.samples())
	r.add(0, activityCounts{Allowed: 10})
	assert.Empty(t, r.samples(), "the first read only sets the base")
	r.add(int64(2*time.Second), activityCounts{Allowed: 15, Denied: 2, ReplMsgsIn: 7})
	r.add(int64(4*time.Second), activityCounts{Allowed: 12, Denied: 3, ReplMsgsIn: 9})
	assert.Equal(t, []activitySample{
		{AtMS: 2000, activityCounts: activityCounts{Allowed: 5, Denied: 2, ReplMsgsIn: 7}},
		{AtMS: 4000, activityCounts: activityCounts{Allowed: 0, Denied: 1, ReplMsgsIn: 2}},
	}, r.samples())
	for i := range activitySlots + 5 {
		r.add(int64(6+2*i)*int64(time.Second), activityCounts{Allowed: uint64(i)})
	}
	s := r.samples()
	require.Len(t, s, activitySlots)
	assert.Equal(t, int64(6+2*(activitySlots+4))*1000, s[len(s)-1].AtMS)
	for i := 1; i < len(s); i++ {
		assert.Equal(t, s[i-1].AtMS+2000, s[i].AtMS)
	}
}

// TestActivityEndpoint: GET /v1/activity serves the ring with its interval,
// and its counts are the node's decisions.
func TestActivityEndpoint(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	base := ta.App.activityNow()
	for range 4 {
		ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	}
	ta.Post("/v1/check", `{"rule":"shadow","key":"k"}`)
	ta.Post("/v1/check", `{"rule":"shadow","key":"k"}`)
	d := ta.App.activityNow().sub(base)
	assert.Equal(t, activityCounts{Allowed: 4, Denied: 1, ShadowDenied: 1}, d)

	var out struct {
		IntervalMS int64            `json:"interval_ms"`
		Samples    []activitySample `json:"samples"`
	}
	r := ta.Get("/v1/activity")
	require.Equal(t, http.StatusOK, r.Status)
	require.NoError(t, json.Unmarshal(r.Body, &out))
	assert.Equal(t, activityEvery.Milliseconds(), out.IntervalMS)
	assert.NotNil(t, out.Samples)
}
