package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/internal/browsertest"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// TestUIInBrowser: on a live node with api.token_file, headless Chromium
// opens /ui, the page asks for the token, and once given shows the node's
// id, every rule with its mode, and a hot key; a click on a rule's
// "shadow" control, confirmed, switches the rule to shadow: what
// /v1/check decides changes (429 before, admitted after).
func TestUIInBrowser(t *testing.T) {
	b := browsertest.New(t)
	tokFile := servertest.WriteTokens(t, t.TempDir(), servertest.Token1+"\n")
	ta := startApp(t, servertest.RulesYAML+"api: {token_file: "+tokFile+"}\n")
	ta.Token = servertest.Token1
	for range 3 {
		require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
	}
	require.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)

	b.Open(ta.API + "/ui")
	b.WaitTrue(`!document.getElementById("auth").hidden`, "the page asks for a token")
	b.Type("#token", servertest.Token1)
	b.Click(`#auth button[type="submit"]`)
	b.WaitTrue(`document.body.dataset.loaded === "1"`, "the page read the node")
	b.WaitTrue(`document.getElementById("node").textContent === `+browsertest.Quote(testSelf.String()), "the node's id")
	for rule, mode := range map[string]string{"r": "enforce", "big": "enforce", "shadow": "shadow"} {
		b.WaitTrue(`document.querySelector('#rules tr[data-rule="`+rule+`"] td[data-mode]').dataset.mode === "`+mode+`"`, rule+"'s mode")
	}
	b.WaitTrue(`document.querySelector('#hotkeys [data-rule="r"] li[data-key="k"]') !== null`, "the hot key")
	b.WaitTrue(`document.querySelector('#fleet [data-pop="eu/ams"]').dataset.state === "heard"`, "its own PoP")
	token := b.String(`document.getElementById("token").value + (localStorage.length + sessionStorage.length) + document.cookie + location.href`)
	assert.Equal(t, "0"+ta.API+"/ui", token, "the token is kept nowhere but the script's memory")

	b.Click(`#rules tr[data-rule="r"] button[data-action="shadow"]`)
	assert.Equal(t, "Set rule r to shadow on every node?", b.Dialog())
	b.WaitTrue(`document.querySelector('#rules tr[data-rule="r"] td[data-mode]').dataset.mode === "shadow"`, "r in shadow")
	assert.Equal(t, "shadow", ta.modeOf("r").Mode)
	res := ta.Post("/v1/check", `{"rule":"r","key":"k"}`)
	assert.Equal(t, http.StatusOK, res.Status, "a shadow rule admits: %s", res.Body)

	b.Click(`#rules tr[data-rule="r"] button[data-action="config"]`)
	assert.Equal(t, "Set rule r back to the mode of its config file on every node?", b.Dialog())
	b.WaitTrue(`document.querySelector('#rules tr[data-rule="r"] td[data-mode]').dataset.mode === "enforce"`, "r enforces again")
	assert.Equal(t, http.StatusTooManyRequests, ta.Post("/v1/check", `{"rule":"r","key":"k"}`).Status)
}
