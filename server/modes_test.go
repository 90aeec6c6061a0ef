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
)

func (ta *testApp) putMode(rule, body string) resp {
	ta.t.Helper()
	return ta.do(http.MethodPut, ta.api+"/v1/rules/"+rule+"/mode", body)
}

func (ta *testApp) modeOf(rule string) RuleModeStatus {
	ta.t.Helper()
	r := ta.get("/v1/rules/" + rule + "/mode")
	require.Equal(ta.t, http.StatusOK, r.status, "%s", r.body)
	var st RuleModeStatus
	require.NoError(ta.t, json.Unmarshal(r.body, &st))
	return st
}

// TestRuleModeAPI: PUT /v1/rules/{name}/mode switches a rule off, to
// shadow, to enforce and back to the file's mode; GET shows it, /v1/status
// lists it, /metrics counts it; bad requests change nothing.
func TestRuleModeAPI(t *testing.T) {
	ta := startApp(t, rulesYAML)
	for i := 0; i < 3; i++ {
		require.Equal(t, 200, ta.post("/v1/check", `{"rule":"r","key":"k"}`).status)
	}
	require.Equal(t, 429, ta.post("/v1/check", `{"rule":"r","key":"k"}`).status)

	r := ta.putMode("r", `{"mode":"off"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var st RuleModeStatus
	require.NoError(t, json.Unmarshal(r.body, &st))
	assert.Equal(t, "off", st.Mode)
	assert.Equal(t, "enforce", st.ConfigMode)
	require.NotNil(t, st.Override)
	assert.Equal(t, "off", st.Override.Mode)
	assert.Equal(t, testSelf.String(), st.Override.SetBy)
	assert.Equal(t, t0/int64(time.Millisecond), st.Override.SetAtMS, "the node's clock")
	assert.Equal(t, st, ta.modeOf("r"))

	for i := 0; i < 5; i++ {
		r = ta.post("/v1/check", `{"rule":"r","key":"k"}`)
		require.Equal(t, 200, r.status, "%s", r.body)
		assert.Equal(t, true, r.json(t)["off"])
	}
	assert.Equal(t, uint64(3), ta.keyTotal("r", "k"), "nothing counted while off")
	r = ta.post("/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"shadow","key":"k"}]}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), `"off":true`)

	mfs := ta.scrape()
	for mode, want := range map[string]float64{"off": 1, "enforce": 0, "shadow": 0} {
		v, ok := metricValue(mfs, "geolimit_rule_mode", "rule", "r", "mode", mode)
		require.True(t, ok)
		assert.Equal(t, want, v, mode)
	}
	v, _ := metricValue(mfs, "geolimit_rule_mode", "rule", "shadow", "mode", "shadow")
	assert.Equal(t, 1.0, v)
	v, _ = metricValue(mfs, "geolimit_rule_mode_overridden", "rule", "r")
	assert.Equal(t, 1.0, v)
	v, _ = metricValue(mfs, "geolimit_rule_mode_changes_total", "origin", "local")
	assert.Equal(t, 1.0, v)
	assert.Equal(t, 6.0, ta.decisions("r", "off"))

	var status struct {
		Rules []struct {
			Name         string        `json:"name"`
			Mode         string        `json:"mode"`
			ConfigMode   string        `json:"config_mode"`
			ModeOverride *ModeOverride `json:"mode_override"`
		} `json:"rules"`
		ModeOverrides []RuleModeStatus `json:"mode_overrides"`
	}
	require.NoError(t, json.Unmarshal(ta.get("/v1/status").body, &status))
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
		assert.Equal(t, tc.status, r.status, "%s: %s", tc.body, r.body)
		assert.Equal(t, map[string]any{"error": tc.msg}, r.json(t), tc.body)
	}
	assert.Equal(t, 404, ta.get("/v1/rules/nope/mode").status)
	assert.Equal(t, 405, ta.post("/v1/rules/r/mode", `{"mode":"off"}`).status)
	assert.Equal(t, st, ta.modeOf("r"), "unchanged")

	// Shadow: counted, never denies.
	ta.clk.Advance(time.Millisecond)
	require.Equal(t, 200, ta.putMode("r", `{"mode":"shadow"}`).status)
	r = ta.post("/v1/check", `{"rule":"r","key":"k"}`)
	require.Equal(t, 200, r.status)
	assert.Equal(t, 1.0, ta.decisions("r", "shadow_denied"))

	// Back to the file's mode.
	require.Equal(t, 200, ta.putMode("r", `{"mode":"config"}`).status)
	st = ta.modeOf("r")
	assert.Equal(t, "enforce", st.Mode)
	assert.Nil(t, st.Override)
	assert.Equal(t, 429, ta.post("/v1/check", `{"rule":"r","key":"k"}`).status)
	require.NoError(t, json.Unmarshal(ta.get("/v1/status").body, &status))
	assert.Empty(t, status.ModeOverrides)
}

// TestRuleModeNeedsToken: with api.token_file, changing or reading a mode
// without the token is refused and changes nothing.
func TestRuleModeNeedsToken(t *testing.T) {
	tokFile := writeTokens(t, t.TempDir(), token1+"\n")
	ta := startApp(t, rulesYAML+"api: {token_file: "+tokFile+"}\n")
	r := ta.putMode("r", `{"mode":"off"}`)
	assert.Equal(t, http.StatusUnauthorized, r.status)
	r = ta.do(http.MethodPut, ta.api+"/v1/rules/r/mode", `{"mode":"off"}`, bearer(token2)...)
	assert.Equal(t, http.StatusUnauthorized, r.status)
	ta.token = token1
	assert.Equal(t, "enforce", ta.modeOf("r").Mode, "unchanged")
	assert.Equal(t, http.StatusOK, ta.putMode("r", `{"mode":"off"}`).status)
	assert.Equal(t, "off", ta.modeOf("r").Mode)
}

// TestRuleModeProxyAndReload: proxy mode with a real upstream lets every
// request of a rule switched off through; a reload keeps the override, and
// one that removes the rule keeps it orphaned until the rule is back.
func TestRuleModeProxyAndReload(t *testing.T) {
	up := newUpstream(t)
	rules := "  - {name: per-ip, limit: 2, window: 1m, match: {path_prefix: /api}}\n"
	ta := startApp(t, proxyYAML(up.URL, "", rules))
	for i := 0; i < 2; i++ {
		require.Equal(t, 200, ta.proxy("GET", "/api/x").status)
	}
	require.Equal(t, 429, ta.proxy("GET", "/api/x").status)
	require.Equal(t, 200, ta.putMode("per-ip", `{"mode":"off"}`).status)
	for i := 0; i < 5; i++ {
		r := ta.proxy("GET", "/api/x")
		require.Equal(t, 200, r.status, "%s", r.body)
	}
	assert.Equal(t, 7, up.count())
	assert.Equal(t, uint64(2), ta.keyTotal("per-ip", "127.0.0.1"))

	ta.writeConfig(proxyYAML(up.URL, "", "  - {name: per-ip, limit: 1, window: 1m, match: {path_prefix: /api}}\n"))
	require.NoError(t, ta.Reload())
	assert.Equal(t, 200, ta.proxy("GET", "/api/x").status, "still off after a reload")

	ta.writeConfig("allow_rule_removal: true\n" + proxyYAML(up.URL, "", "  - {name: other, limit: 1, window: 1m, match: {path_prefix: /other}}\n"))
	require.NoError(t, ta.Reload())
	st := ta.modeOf("per-ip")
	assert.True(t, st.Orphaned)
	assert.Equal(t, "off", st.Mode)

	ta.writeConfig("allow_rule_removal: true\n" + proxyYAML(up.URL, "", rules))
	require.NoError(t, ta.Reload())
	st = ta.modeOf("per-ip")
	assert.False(t, st.Orphaned)
	assert.Equal(t, 200, ta.proxy("GET", "/api/x").status, "off again with the rule")
}

// TestRuleModeStateFile: an override is written to state.file at once and
// a restarted node (after a crash: the file as it was) keeps it.
func TestRuleModeStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	yaml := fmt.Sprintf("state: {file: %q, interval: 1h}\n", path) + rulesYAML
	a := startApp(t, yaml)
	require.Equal(t, 200, a.putMode("r", `{"mode":"off"}`).status)
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

	n := restarted(t, fmt.Sprintf("state: {file: %q, interval: 1h}\n", next)+rulesYAML)
	assert.Equal(t, want, n.modeOf("r"))
	assert.Equal(t, 200, n.post("/v1/check", `{"rule":"r","key":"k"}`).status)
}
