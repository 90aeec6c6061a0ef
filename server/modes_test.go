package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/internal/statefile"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

func (ta *testApp) putMode(rule, body string) resp {
	ta.T.Helper()
	return ta.Do(http.MethodPut, ta.API+"/v1/rules/"+rule+"/mode", body)
}

func (ta *testApp) modeOf(rule string) RuleModeStatus {
	ta.T.Helper()
	r := ta.Get("/v1/rules/" + rule + "/mode")
	require.Equal(ta.T, http.StatusOK, r.Status, "%s", r.Body)
	var st RuleModeStatus
	require.NoError(ta.T, json.Unmarshal(r.Body, &st))
	return st
}

// TestRuleModeAPI: PUT /v1/rules/{name}/mode switches a rule off, to
// shadow, to enforce and back to the file's mode; GET shows it, /v1/status
// lists it, /metrics counts it; bad requests change nothing.
func TestRuleModeAPI(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	for i := 0; i < 3; i++ {
		require.Equal(t, 200, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
	}
	require.Equal(t, 429, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)

	r := ta.putMode("r", `{"mode":"off"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var st RuleModeStatus
	require.NoError(t, json.Unmarshal(r.Body, &st))
	assert.Equal(t, "off", st.Mode)
	assert.Equal(t, "enforce", st.ConfigMode)
	require.NotNil(t, st.Override)
	assert.Equal(t, "off", st.Override.Mode)
	assert.Equal(t, testSelf.String(), st.Override.SetBy)
	assert.Equal(t, t0/int64(time.Millisecond), st.Override.SetAtMS, "the node's clock")
	assert.Equal(t, st, ta.modeOf("r"))

	for i := 0; i < 5; i++ {
		r = ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assert.Equal(t, true, r.JSON(t)["off"])
	}
	assert.Equal(t, uint64(3), ta.KeyTotal("r", "k"), "nothing counted while off")
	r = ta.Post("/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"shadow","key":"k"}]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Contains(t, string(r.Body), `"off":true`)

	mfs := ta.Scrape()
	for mode, want := range map[string]float64{"off": 1, "enforce": 0, "shadow": 0} {
		v, ok := servertest.MetricValue(mfs, "geolimit_rule_mode", "rule", "r", "mode", mode)
		require.True(t, ok)
		assert.Equal(t, want, v, mode)
	}
	v, _ := servertest.MetricValue(mfs, "geolimit_rule_mode", "rule", "shadow", "mode", "shadow")
	assert.Equal(t, 1.0, v)
	v, _ = servertest.MetricValue(mfs, "geolimit_rule_mode_overridden", "rule", "r")
	assert.Equal(t, 1.0, v)
	v, _ = servertest.MetricValue(mfs, "geolimit_rule_mode_changes_total", "origin", "local")
	assert.Equal(t, 1.0, v)
	assert.Equal(t, 6.0, ta.Decisions("r", "off"))

	var status struct {
		Rules []struct {
			Name         string        `json:"name"`
			Mode         string        `json:"mode"`
			ConfigMode   string        `json:"config_mode"`
			ModeOverride *ModeOverride `json:"mode_override"`
		} `json:"rules"`
		ModeOverrides []RuleModeStatus `json:"mode_overrides"`
	}
	require.NoError(t, json.Unmarshal(ta.Get("/v1/status").Body, &status))
	require.Len(t, status.ModeOverrides, 1)
	assert.Equal(t, st, status.ModeOverrides[0])
	for _, ru := range status.Rules {
		if ru.Name == "r" {
			assert.Equal(t, "off", ru.Mode)
			assert.Equal(t, "enforce", ru.ConfigMode)
			assert.Equal(t, st.Override, ru.ModeOverride)
		}
	}

	// Bad requests: a clear error naming the field, nothing changed.
	for _, tc := range []struct {
		rule, body string
		status     int
		msg        string
	}{
		{"r", `{"mode":"disabled"}`, 400, `mode: unknown mode "disabled" (want enforce, shadow, off or config)`},
		{"r", `{"mode":""}`, 400, `mode: unknown mode "" (want enforce, shadow, off or config)`},
		{"r", `{}`, 400, "mode: required (enforce, shadow, off or config)"},
		{"r", `{"mode":"off","why":"x"}`, 400, `bad JSON: json: unknown field "why"`},
		{"r", `{"mode":`, 400, "bad JSON: unexpected EOF"},
		{"r", `{"mode":"off"} {}`, 400, "bad JSON: more than one value"},
		{"nope", `{"mode":"off"}`, 404, `unknown rule "nope"`},
	} {
		r := ta.putMode(tc.rule, tc.body)
		assert.Equal(t, tc.status, r.Status, "%s: %s", tc.body, r.Body)
		assert.Equal(t, map[string]any{"error": tc.msg}, r.JSON(t), tc.body)
	}
	assert.Equal(t, 404, ta.Get("/v1/rules/nope/mode").Status)
	assert.Equal(t, 405, ta.Post("/v1/rules/r/mode", `{"mode":"off"}`).Status)
	assert.Equal(t, st, ta.modeOf("r"), "unchanged")

	// Shadow: counted, never denies.
	ta.Clk.Advance(time.Millisecond)
	require.Equal(t, 200, ta.putMode("r", `{"mode":"shadow"}`).Status)
	r = ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, 1.0, ta.Decisions("r", "shadow_denied"))

	// Back to the file's mode.
	require.Equal(t, 200, ta.putMode("r", `{"mode":"config"}`).Status)
	st = ta.modeOf("r")
	assert.Equal(t, "enforce", st.Mode)
	assert.Nil(t, st.Override)
	assert.Equal(t, 429, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
	require.NoError(t, json.Unmarshal(ta.Get("/v1/status").Body, &status))
	assert.Empty(t, status.ModeOverrides)
}

// TestRuleModeNeedsToken: with api.token_file, changing or reading a mode
// without the token is refused and changes nothing.
func TestRuleModeNeedsToken(t *testing.T) {
	tokFile := servertest.WriteTokens(t, t.TempDir(), servertest.Token1+"\n")
	ta := startApp(t, servertest.RulesYAML+"api: {token_file: "+tokFile+"}\n")
	r := ta.putMode("r", `{"mode":"off"}`)
	assert.Equal(t, http.StatusUnauthorized, r.Status)
	r = ta.Do(http.MethodPut, ta.API+"/v1/rules/r/mode", `{"mode":"off"}`, bearer(servertest.Token2)...)
	assert.Equal(t, http.StatusUnauthorized, r.Status)
	ta.Token = servertest.Token1
	assert.Equal(t, "enforce", ta.modeOf("r").Mode, "unchanged")
	assert.Equal(t, http.StatusOK, ta.putMode("r", `{"mode":"off"}`).Status)
	assert.Equal(t, "off", ta.modeOf("r").Mode)
}

// TestRuleModeProxyAndReload: proxy mode with a real upstream lets every
// request of a rule switched off through; a reload keeps the override, and
// one that removes the rule keeps it orphaned until the rule is back.
func TestRuleModeProxyAndReload(t *testing.T) {
	up := servertest.NewUpstream(t)
	rules := "  - {name: per-ip, limit: 2, window: 1m, match: {path_prefix: /api}}\n"
	ta := startApp(t, servertest.ProxyYAML(up.URL, "", rules))
	for i := 0; i < 2; i++ {
		require.Equal(t, 200, ta.Proxy("GET", "/api/x").Status)
	}
	require.Equal(t, 429, ta.Proxy("GET", "/api/x").Status)
	require.Equal(t, 200, ta.putMode("per-ip", `{"mode":"off"}`).Status)
	for i := 0; i < 5; i++ {
		r := ta.Proxy("GET", "/api/x")
		require.Equal(t, 200, r.Status, "%s", r.Body)
	}
	assert.Equal(t, 7, up.Count())
	assert.Equal(t, uint64(2), ta.KeyTotal("per-ip", "127.0.0.1"))

	ta.WriteConfig(servertest.ProxyYAML(up.URL, "", "  - {name: per-ip, limit: 1, window: 1m, match: {path_prefix: /api}}\n"))
	require.NoError(t, ta.App.Reload())
	assert.Equal(t, 200, ta.Proxy("GET", "/api/x").Status, "still off after a reload")

	ta.WriteConfig("allow_rule_removal: true\n" + servertest.ProxyYAML(up.URL, "", "  - {name: other, limit: 1, window: 1m, match: {path_prefix: /other}}\n"))
	require.NoError(t, ta.App.Reload())
	st := ta.modeOf("per-ip")
	assert.True(t, st.Orphaned)
	assert.Equal(t, "off", st.Mode)

	ta.WriteConfig("allow_rule_removal: true\n" + servertest.ProxyYAML(up.URL, "", rules))
	require.NoError(t, ta.App.Reload())
	st = ta.modeOf("per-ip")
	assert.False(t, st.Orphaned)
	assert.Equal(t, 200, ta.Proxy("GET", "/api/x").Status, "off again with the rule")
}

// TestRuleModeStateFile: an override is written to state.file at once and
// a restarted node (after a crash: the file as it was) keeps it.
func TestRuleModeStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	yaml := fmt.Sprintf("state: {file: %q, interval: 1h}\n", path) + servertest.RulesYAML
	a := startApp(t, yaml)
	require.Equal(t, 200, a.putMode("r", `{"mode":"off"}`).Status)
	want := a.modeOf("r")
	require.Eventually(t, func() bool {
		st, err := statefile.Read(path)
		if err != nil {
			return false
		}
		for _, d := range st.Deltas {
			if modes.Section.Len(&d) > 0 {
				return true
			}
		}
		return false
	}, wait, poll, "written without waiting for state.interval")
	next := filepath.Join(dir, "crashed")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(next, b, 0o600))

	n := restarted(t, fmt.Sprintf("state: {file: %q, interval: 1h}\n", next)+servertest.RulesYAML)
	assert.Equal(t, want, n.modeOf("r"))
	assert.Equal(t, 200, n.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
}
