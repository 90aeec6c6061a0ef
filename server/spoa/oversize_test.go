package spoa

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An answer that does not fit HAProxy's max-frame-size must not say "not
// decided" (status 400) for messages that were decided and counted: it
// says briefly what was decided, without the RateLimit headers and body.
func TestOversizeAnswerSaysWhatWasDecided(t *testing.T) {
	_, addr, env := startAgent(t, rulesYAML, Config{})
	h := dialAgent(t, addr)
	h.send(typeHAProxyHello, flagFin, helloPayload(256, false))
	f := h.recv()
	require.EqualValues(t, typeAgentHello, f.typ)
	api := req{method: "GET", path: "/api/items", src: client, headers: [][2]string{{"x-api-key", "k1"}}}
	one := checkPayload(api)
	var p []byte
	for range 2 {
		p = append(p, one...)
	}
	v := h.check(p)
	require.EqualValues(t, 2, keyTotal(t, env, "per-key", "k1"), "both messages were decided and counted")
	assert.EqualValues(t, 1, v[varAllowed], "and the answer says so")
	assert.NotEqual(t, int64(400), v[varStatus])
	assert.NotContains(t, v, varRateLimit, "the headers did not fit")
}
