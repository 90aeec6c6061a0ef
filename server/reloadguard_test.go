package server

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const threeRules = `
rules:
  - {name: login, limit: 10, window: 1h}
  - {name: api, limit: 10, window: 1h}
  - {name: search, limit: 10, window: 1h}
`

// A reload that would drop most rules (a truncated file) is refused unless
// the file allows it; and a rule removed, then restored, goes on with its
// counts instead of admitting its limit again.
func TestReloadRuleRemoval(t *testing.T) {
	ta := startApp(t, threeRules)
	spend := func(rule string, n int) (admitted int) {
		for range n {
			if r := ta.Post("/v1/check", fmt.Sprintf(`{"rule":%q,"key":"k"}`, rule)); r.Status == http.StatusOK {
				admitted++
			}
		}
		return admitted
	}
	require.Equal(t, 10, spend("login", 10))

	truncated := "\nrules:\n  - {name: api, limit: 10, window: 1h}\n"
	ta.WriteConfig(truncated)
	err := ta.App.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "removes 2 of the 3 running rules (login, search); set allow_rule_removal: true")
	v, _ := servertest.MetricValue(ta.Scrape(), "geolimit_config_reloads_total", "result", "refused")
	assert.Equal(t, 1.0, v)
	assert.Zero(t, spend("login", 1), "the old rules keep serving")

	ta.WriteConfig("allow_rule_removal: true\n" + truncated)
	require.NoError(t, ta.App.Reload())
	assert.Equal(t, http.StatusNotFound, ta.Post("/v1/check", `{"rule":"login","key":"k"}`).Status)

	ta.WriteConfig(threeRules)
	require.NoError(t, ta.App.Reload())
	assert.Zero(t, spend("login", 10), "a restored rule goes on with its counts")
	assert.Equal(t, 10, spend("search", 10))

	// Removing one rule of three is a reload like any other.
	ta.WriteConfig("\nrules:\n  - {name: login, limit: 10, window: 1h}\n  - {name: api, limit: 10, window: 1h}\n")
	require.NoError(t, ta.App.Reload())
	// Removing exactly half (one of two) is refused: a file cut in the
	// middle keeps about half of its rules.
	ta.WriteConfig("\nrules:\n  - {name: login, limit: 10, window: 1h}\n")
	err = ta.App.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "removes 1 of the 2 running rules (api)")
}
