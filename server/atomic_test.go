package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const atomicYAML = `
rules:
  - {name: r, limit: 3, window: 1m}
  - {name: other, limit: 10, window: 1m}
  - {name: watch, limit: 1, window: 1m, mode: shadow}
`

type atomicResult struct {
	Allowed      bool   `json:"allowed"`
	Rule         string `json:"rule"`
	Key          string `json:"key"`
	Remaining    uint64 `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
}

type atomicAnswer struct {
	Allowed *bool          `json:"allowed"`
	Counted *int           `json:"counted"`
	Results []atomicResult `json:"results"`
}

func (ta *testApp) checks(body string) atomicAnswer {
	ta.T.Helper()
	r := ta.Post("/v1/checks", body)
	require.Equal(ta.T, http.StatusOK, r.Status, "%s", r.Body)
	var out atomicAnswer
	require.NoError(ta.T, json.Unmarshal(r.Body, &out), "%s", r.Body)
	return out
}

func (ta *testApp) spend(rule, key string, n int) {
	ta.T.Helper()
	for i := 0; i < n; i++ {
		require.Equal(ta.T, http.StatusOK, ta.Post("/v1/check", `{"rule":"`+rule+`","key":"`+key+`"}`).Status)
	}
}

// TestChecksAtomic: with "atomic": true all checks pass or none is counted.
func TestChecksAtomic(t *testing.T) {
	ta := startApp(t, atomicYAML)
	ta.spend("r", "a", 2)

	// Without atomic, a denied check does not stop the next from counting.
	out := ta.checks(`{"checks":[{"rule":"r","key":"a","cost":2},{"rule":"other","key":"x"}]}`)
	assert.Nil(t, out.Allowed, "no batch verdict without atomic")
	assert.Nil(t, out.Counted)
	assert.False(t, out.Results[0].Allowed)
	assert.True(t, out.Results[1].Allowed)
	assert.EqualValues(t, 1, ta.KeyTotal("other", "x"))

	// With it, the denied check stops the batch before anything counts.
	out = ta.checks(`{"atomic":true,"checks":[{"rule":"r","key":"a","cost":2},{"rule":"other","key":"x"},{"rule":"watch","key":"w"}]}`)
	require.NotNil(t, out.Allowed)
	assert.False(t, *out.Allowed)
	assert.Equal(t, 0, *out.Counted)
	require.Len(t, out.Results, 3)
	assert.False(t, out.Results[0].Allowed)
	assert.Positive(t, out.Results[0].RetryAfterMS)
	assert.True(t, out.Results[1].Allowed, "the check that would fit says so")
	assert.EqualValues(t, 9, out.Results[1].Remaining, "what is left as the key stands: nothing was spent")
	assert.True(t, out.Results[2].Allowed)
	assert.EqualValues(t, 2, ta.KeyTotal("r", "a"))
	assert.EqualValues(t, 1, ta.KeyTotal("other", "x"), "nothing counted")
	assert.EqualValues(t, 0, ta.KeyTotal("watch", "w"), "not even the shadow rule")
	assert.EqualValues(t, 2, ta.Decisions("r", "denied"), "the denial is a decision")
	assert.EqualValues(t, 1, ta.Decisions("other", "allowed"))

	// All pass: all count, answered as a plain batch would be.
	out = ta.checks(`{"checks":[{"rule":"other","key":"x"},{"rule":"r","key":"a"},{"rule":"watch","key":"w"}],"atomic":true}`)
	assert.True(t, *out.Allowed)
	assert.Equal(t, 3, *out.Counted)
	assert.Equal(t, []atomicResult{
		{Allowed: true, Rule: "other", Key: "x", Remaining: 8},
		{Allowed: true, Rule: "r", Key: "a", Remaining: 0},
		{Allowed: true, Rule: "watch", Key: "w", Remaining: 0},
	}, out.Results)
	assert.EqualValues(t, 2, ta.KeyTotal("other", "x"))
	assert.EqualValues(t, 3, ta.KeyTotal("r", "a"))

	// A shadow rule over its limit never denies the batch.
	out = ta.checks(`{"atomic":true,"checks":[{"rule":"watch","key":"w"},{"rule":"other","key":"y"}]}`)
	assert.True(t, *out.Allowed)
	assert.Equal(t, 2, *out.Counted)
	assert.EqualValues(t, 1, ta.Decisions("watch", "shadow_denied"))
	assert.EqualValues(t, 1, ta.KeyTotal("other", "y"))

	// "atomic": false and null are the plain batch.
	for _, v := range []string{"false", "null"} {
		out = ta.checks(`{"atomic":` + v + `,"checks":[{"rule":"other","key":"z"}]}`)
		assert.Nil(t, out.Allowed, v)
	}
	r := ta.Post("/v1/checks", `{"atomic":true,"checks":[]}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"allowed":true,"counted":0,"results":[]}`, string(r.Body))
}

// TestChecksAtomicSameKey: checks of one rule and key in an atomic batch
// are judged together.
func TestChecksAtomicSameKey(t *testing.T) {
	ta := startApp(t, atomicYAML)
	out := ta.checks(`{"atomic":true,"checks":[{"rule":"r","key":"k"},{"rule":"other","key":"k"},{"rule":"r","key":"k"},{"rule":"r","key":"k"}]}`)
	assert.True(t, *out.Allowed)
	assert.Equal(t, 4, *out.Counted)
	assert.EqualValues(t, []uint64{2, 9, 1, 0}, []uint64{out.Results[0].Remaining, out.Results[1].Remaining, out.Results[2].Remaining, out.Results[3].Remaining})
	assert.EqualValues(t, 3, ta.KeyTotal("r", "k"))

	// Each fits alone, not together.
	ta.spend("r", "j", 2)
	out = ta.checks(`{"atomic":true,"checks":[{"rule":"r","key":"j"},{"rule":"r","key":"j"}]}`)
	assert.False(t, *out.Allowed)
	assert.Equal(t, 0, *out.Counted)
	assert.True(t, out.Results[0].Allowed)
	assert.False(t, out.Results[1].Allowed)
	assert.EqualValues(t, 2, ta.KeyTotal("r", "j"))

	// More than the limit together can never pass: a bad request.
	for body, msg := range map[string]string{
		`{"atomic":true,"checks":[{"rule":"r","key":"m","cost":2},{"rule":"other","key":"m"},{"rule":"r","key":"m","cost":2}]}`: `checks[2]: cost: the batch's checks of rule "r" and key "m" cost 4 together, over the rule's limit 3: an atomic batch could never pass`,
		`{"atomic":true,"checks":[{"rule":"watch","key":"m"},{"rule":"watch","key":"m"}]}`:                                      `checks[1]: cost: the batch's checks of rule "watch" and key "m" cost 2 together`,
		`{"atomic":1,"checks":[]}`: "bad JSON: wrong JSON type: atomic: want true or false at offset 10",
	} {
		r := ta.Post("/v1/checks", body)
		require.Equal(t, http.StatusBadRequest, r.Status, body)
		assert.Contains(t, r.JSON(t)["error"], msg)
	}
	assert.EqualValues(t, 0, ta.KeyTotal("r", "m"))
	assert.EqualValues(t, 0, ta.KeyTotal("other", "m"))
}
