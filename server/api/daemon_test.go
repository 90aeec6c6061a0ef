package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/geolimit/geolimit/window"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckAllowThenDeny(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	ta.Clk.Set(t0 + int64(15*time.Second)) // a quarter into the window
	for i := 0; i < 3; i++ {
		r := ta.Post("/v1/check", `{"rule":"r","key":"203.0.113.7"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		body := r.JSON(t)
		assert.Equal(t, true, body["allowed"])
		assert.Equal(t, "r", body["rule"])
		assert.Equal(t, "203.0.113.7", body["key"])
		assert.EqualValues(t, 3, body["limit"])
		assert.EqualValues(t, 2-i, body["remaining"])
		assert.EqualValues(t, 0, body["retry_after_ms"])
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		name, p := servertest.ParseItem(t, r.Header.Get("RateLimit"))
		assert.Equal(t, "r", name)
		assert.EqualValues(t, 2-i, p["r"])
		assert.Empty(t, r.Header.Get("Retry-After"), "allowed responses carry no Retry-After")
	}

	r := ta.Post("/v1/check", `{"rule":"r","key":"203.0.113.7"}`)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	// The window maths says when a request fits again: at 15s into the
	// window, 3 counted in this window and none in the previous one.
	want := window.Decide(3, 1, 0, 3, int64(15*time.Second), int64(time.Minute))
	require.False(t, want.Allowed)
	retrySec := (want.RetryAfter + int64(time.Second) - 1) / int64(time.Second)
	assert.InDelta(t, float64(65*time.Second), float64(want.RetryAfter), float64(time.Millisecond),
		"45s to the next window, then 20s for 3*(1-f) <= 2")

	body := r.JSON(t)
	assert.Equal(t, false, body["allowed"])
	assert.EqualValues(t, 0, body["remaining"])
	assert.EqualValues(t, (want.RetryAfter+int64(time.Millisecond)-1)/int64(time.Millisecond), body["retry_after_ms"])
	assert.EqualValues(t, (want.Reset+int64(time.Millisecond)-1)/int64(time.Millisecond), body["reset_ms"])

	h := r.Header
	assert.Equal(t, retrySec, servertest.HeaderInt(t, h, "Retry-After"))
	assert.Equal(t, `"r";q=3;w=60`, h.Get("RateLimit-Policy"))
	name, p := servertest.ParseItem(t, h.Get("RateLimit"))
	assert.Equal(t, "r", name)
	assert.Equal(t, map[string]int64{"r": 0, "t": retrySec}, p)
	assert.EqualValues(t, 3, servertest.HeaderInt(t, h, "X-RateLimit-Limit"))
	assert.EqualValues(t, 0, servertest.HeaderInt(t, h, "X-RateLimit-Remaining"))
	assert.Equal(t, retrySec, servertest.HeaderInt(t, h, "X-RateLimit-Reset"))

	assert.EqualValues(t, 3, ta.KeyTotal("r", "203.0.113.7"), "the denied request is not counted")

	// Once the wait is over the request fits again.
	ta.Clk.Advance(time.Duration(want.RetryAfter))
	r = ta.Post("/v1/check", `{"rule":"r","key":"203.0.113.7"}`)
	assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func TestCheckCost(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	r := ta.Post("/v1/check", `{"rule":"big","key":"k"}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, 998, r.JSON(t)["remaining"], "omitted cost is the rule's cost (2)")
	r = ta.Post("/v1/check", `{"rule":"big","key":"k","cost":10}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, 988, r.JSON(t)["remaining"])
	assert.EqualValues(t, 12, ta.KeyTotal("big", "k"))
	name, p := servertest.ParseItem(t, r.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "big", name)
	assert.Equal(t, map[string]int64{"q": 1000, "w": 10}, p)
}

func TestChecksBatch(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&sb, `{"rule":"r","key":"a"},`)
	}
	sb.WriteString(`{"rule":"big","key":"b\u00e9","cost":7}]}`)
	r := ta.Post("/v1/checks", sb.String())
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var out struct {
		Results []struct {
			Allowed      bool   `json:"allowed"`
			Rule         string `json:"rule"`
			Key          string `json:"key"`
			Limit        uint64 `json:"limit"`
			Remaining    uint64 `json:"remaining"`
			ResetMS      int64  `json:"reset_ms"`
			RetryAfterMS int64  `json:"retry_after_ms"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &out))
	require.Len(t, out.Results, 6)
	for i, res := range out.Results[:5] {
		assert.Equal(t, i < 3, res.Allowed, "check %d", i)
		assert.Equal(t, "r", res.Rule)
		assert.Equal(t, "a", res.Key)
		if !res.Allowed {
			assert.Positive(t, res.RetryAfterMS)
		}
	}
	last := out.Results[5]
	assert.True(t, last.Allowed)
	assert.Equal(t, "bé", last.Key)
	assert.EqualValues(t, 993, last.Remaining)
	assert.EqualValues(t, 3, ta.KeyTotal("r", "a"))
	assert.EqualValues(t, 7, ta.KeyTotal("big", "bé"))
	assert.EqualValues(t, 3, ta.Decisions("r", "allowed"))
	assert.EqualValues(t, 2, ta.Decisions("r", "denied"))

	r = ta.Post("/v1/checks", `{"checks":[]}`)
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"results":[]}`, string(r.Body))
}

// TestBadInputs checks that every kind of bad request gets its status and a
// JSON error, and counts nothing.
func TestBadInputs(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML+"limits: {max_body_bytes: 512, max_batch: 4}\n")
	tests := []struct {
		name, method, path, body string
		status                   int
		msg                      string
	}{
		{"bad JSON", "POST", "/v1/check", `{"rule":"r","key":`, 400, "bad JSON"},
		{"not an object", "POST", "/v1/check", `["r","k"]`, 400, "bad JSON"},
		{"key not a string", "POST", "/v1/check", `{"rule":"r","key":5}`, 400, "bad JSON"},
		{"trailing garbage", "POST", "/v1/check", `{"rule":"r","key":"k"}x`, 400, "bad JSON"},
		{"empty body", "POST", "/v1/check", ``, 400, "bad JSON"},
		{"missing rule", "POST", "/v1/check", `{"key":"k"}`, 400, "rule: required"},
		{"unknown rule", "POST", "/v1/check", `{"rule":"nope","key":"k"}`, 404, `unknown rule "nope"`},
		{"empty key", "POST", "/v1/check", `{"rule":"r","key":""}`, 400, "key: must not be empty"},
		{"missing key", "POST", "/v1/check", `{"rule":"r"}`, 400, "key: must not be empty"},
		{"key not UTF-8", "POST", "/v1/check", "{\"rule\":\"r\",\"key\":\"k\xff\"}", 400, "key: not valid UTF-8"},
		{"zero cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":0}`, 400, "cost: must be a positive integer"},
		{"negative cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":-2}`, 400, "cost: must be a positive integer"},
		{"fractional cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":0.5}`, 400, "cost: must be a positive integer"},
		{"string cost", "POST", "/v1/check", `{"rule":"r","key":"k","cost":"1"}`, 400, "bad JSON"},
		{"cost over limit", "POST", "/v1/check", `{"rule":"r","key":"k","cost":4}`, 400, "exceeds the rule's limit 3"},
		{"oversized body", "POST", "/v1/check", `{"rule":"r","key":"k","pad":"` + strings.Repeat("x", 600) + `"}`, 413, "request body larger than 512 bytes"},
		{"wrong method check", "GET", "/v1/check", ``, 405, "method not allowed"},
		{"wrong method checks", "PUT", "/v1/checks", `{"checks":[]}`, 405, "method not allowed"},
		{"batch bad JSON", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"}`, 400, "bad JSON"},
		{"batch one unknown rule", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"x","key":"k"}]}`, 404, `checks[1]: unknown rule "x"`},
		{"batch one empty key", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"r","key":""}]}`, 400, "checks[1]: key: must not be empty"},
		{"batch one bad cost", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{"rule":"r","key":"k","cost":-1}]}`, 400, "checks[1]: cost"},
		{"batch too many", "POST", "/v1/checks", `{"checks":[{"rule":"r","key":"k"},{},{},{},{}]}`, 413, "more than 4"},
		{"batch oversized body", "POST", "/v1/checks", `{"checks":[],"pad":"` + strings.Repeat("x", 600) + `"}`, 413, "request body larger"},
		{"unknown endpoint", "GET", "/v2/check", ``, 404, "no such endpoint"},
		{"key view unknown rule", "GET", "/v1/keys/nope/k", ``, 404, "unknown rule"},
		{"key view wrong method", "POST", "/v1/keys/r/k", ``, 405, "method not allowed"},
		{"status wrong method", "DELETE", "/v1/status", ``, 405, "method not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ta.Do(tt.method, ta.API+tt.path, tt.body)
			require.Equal(t, tt.status, r.Status, "%s", r.Body)
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			msg, ok := r.JSON(t)["error"].(string)
			require.True(t, ok, "body %s", r.Body)
			assert.Contains(t, msg, tt.msg)
			if tt.status == 405 {
				assert.NotEmpty(t, r.Header.Get("Allow"))
			}
		})
	}
	assert.Zero(t, ta.KeyTotal("r", "k"), "nothing counted")
	assert.Zero(t, ta.Decisions("r", "allowed"))
	assert.Zero(t, ta.Decisions("r", "denied"))
	v, ok := servertest.MetricValue(ta.Scrape(), "geolimit_store_keys")
	require.True(t, ok)
	assert.Zero(t, v, "no key created")
}

func TestKeyView(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"/a/b c"}`).Status)
	ta.Clk.Advance(time.Minute + 30*time.Second)
	require.Equal(t, http.StatusOK, ta.Post("/v1/check", `{"rule":"r","key":"/a/b c"}`).Status)

	r := ta.Get("/v1/keys/r/%2Fa%2Fb%20c")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var v struct {
		Rule     string  `json:"rule"`
		Key      string  `json:"key"`
		Limit    uint64  `json:"limit"`
		Estimate float64 `json:"estimate"`
		Windows  []struct {
			Index    int64             `json:"index"`
			Total    uint64            `json:"total"`
			Replicas map[string]uint64 `json:"replicas"`
		} `json:"windows"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &v))
	assert.Equal(t, "r", v.Rule)
	assert.Equal(t, "/a/b c", v.Key)
	assert.EqualValues(t, 3, v.Limit)
	assert.InDelta(t, 1.5, v.Estimate, 1e-9, "prev 1 * (1 - 0.5) + curr 1")
	require.Len(t, v.Windows, 2)
	w := t0 / int64(time.Minute)
	assert.Equal(t, w, v.Windows[0].Index)
	assert.Equal(t, w+1, v.Windows[1].Index)
	for _, win := range v.Windows {
		assert.EqualValues(t, 1, win.Total)
		assert.Equal(t, map[string]uint64{servertest.Self.String(): 1}, win.Replicas)
	}
	// Viewing counts nothing.
	r2 := ta.Get("/v1/keys/r/%2Fa%2Fb%20c")
	assert.Equal(t, string(r.Body), string(r2.Body))

	r = ta.Get("/v1/keys/r/never-seen")
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"rule":"r","key":"never-seen","limit":3,"estimate":0,"windows":[]}`, string(r.Body))
}

func TestShadowRule(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	for i := 0; i < 3; i++ {
		r := ta.Post("/v1/check", `{"rule":"shadow","key":"k"}`)
		require.Equal(t, http.StatusOK, r.Status, "shadow rules never deny")
		assert.Equal(t, true, r.JSON(t)["allowed"])
	}
	assert.EqualValues(t, 1, ta.Decisions("shadow", "allowed"))
	assert.EqualValues(t, 2, ta.Decisions("shadow", "shadow_denied"))
	assert.EqualValues(t, 0, ta.Decisions("shadow", "denied"))
	assert.EqualValues(t, 1, ta.KeyTotal("shadow", "k"), "what a shadow rule would deny is not counted")
}

func TestChunkedBody(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML+"limits: {max_body_bytes: 512}\n")
	send := func(body string) servertest.Resp {
		req, err := http.NewRequest("POST", ta.API+"/v1/check", io.MultiReader(strings.NewReader(body)))
		require.NoError(t, err)
		require.EqualValues(t, 0, req.ContentLength, "sent chunked")
		res, err := ta.Client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return servertest.Resp{Status: res.StatusCode, Header: res.Header, Body: b}
	}
	r := send(`{"rule":"r","key":"chunked"}`)
	assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = send(`{"rule":"r","key":"chunked","pad":"` + strings.Repeat("x", 1000) + `"}`)
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1, ta.KeyTotal("r", "chunked"))
}

// Keys must be valid UTF-8: "\xff" and "\xfe" would be counted as two keys
// but answered as the same U+FFFD.
func TestCheckKeyNotUTF8(t *testing.T) {
	ta := startApp(t, servertest.RulesYAML)
	for _, k := range []string{"\xff", "\xfe", "a\xc3"} {
		r := ta.Post("/v1/check", `{"rule":"r","key":"`+k+`"}`)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%q", k)
		assert.Contains(t, string(r.Body), "key: not valid UTF-8")
	}
	r := ta.Post("/v1/check", `{"rule":"r","key":"caf\u00e9"}`)
	assert.Equal(t, http.StatusOK, r.Status, "escaped non-ASCII is fine: %s", r.Body)
	r = ta.Post("/v1/check", `{"rule":"r","key":"café"}`)
	assert.Equal(t, http.StatusOK, r.Status, "raw UTF-8 too: %s", r.Body)
}
