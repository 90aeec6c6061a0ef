package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

const checkYAML = `
rules:
  - {name: tok, limit: 3, window: 1m}
  - {name: slots, kind: concurrency, limit: 1}
`

func handler(t *testing.T) *Handler {
	env, _ := frontendtest.Env(t, checkYAML)
	return New(env, Config{MaxBodyBytes: 1 << 20, MaxBatch: 10})
}

func call(h http.HandlerFunc, method, target, body string) (*httptest.ResponseRecorder, map[string]any) {
	w := httptest.NewRecorder()
	h(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w, m
}

// The API renders the pipeline's answer: status, header fields and body;
// a long key is hashed as every front end hashes it, and looked up by its
// value.
func TestServeCheckRendersTheAnswer(t *testing.T) {
	h := handler(t)
	long := strings.Repeat("v", 600)
	sum := sha256.Sum256([]byte(long))
	forged := "sha256:" + hex.EncodeToString(sum[:])
	for i := range 3 {
		w, m := call(h.ServeCheck, "POST", "/v1/check", `{"rule":"tok","key":"`+long+`"}`)
		require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
		assert.Equal(t, long, m["key"], "named as sent")
		assert.EqualValues(t, 2-i, m["remaining"])
		assert.Equal(t, `"tok";q=3;w=60`, w.Header().Get("RateLimit-Policy"))
	}
	w, m := call(h.ServeCheck, "POST", "/v1/check", `{"rule":"tok","key":"`+long+`"}`)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, false, m["allowed"])
	assert.NotEmpty(t, w.Header().Get("Retry-After"))

	w, _ = call(h.ServeCheck, "POST", "/v1/check", `{"rule":"tok","key":"`+forged+`"}`)
	assert.Equal(t, http.StatusOK, w.Code, "the hashed spelling is a key of its own")

	r := httptest.NewRequest("GET", "/v1/keys/tok/"+url.PathEscape(long), nil)
	r.SetPathValue("rule", "tok")
	r.SetPathValue("key", long)
	kw := httptest.NewRecorder()
	h.ServeKey(kw, r)
	require.Equal(t, http.StatusOK, kw.Code, "%s", kw.Body)
	var v struct {
		Key      string  `json:"key"`
		Estimate float64 `json:"estimate"`
	}
	require.NoError(t, json.Unmarshal(kw.Body.Bytes(), &v))
	assert.Equal(t, long, v.Key)
	assert.EqualValues(t, 3, v.Estimate)
}

// /v1/acquire renders a lease, or a denial, from the same answer.
func TestServeAcquireRendersTheAnswer(t *testing.T) {
	h := handler(t)
	w, m := call(h.ServeAcquire, "POST", "/v1/acquire", `{"rule":"slots","key":"k"}`)
	require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
	assert.Len(t, m["lease"], 32)
	assert.Equal(t, `"slots";q=1`, w.Header().Get("RateLimit-Policy"))
	w, m = call(h.ServeAcquire, "POST", "/v1/acquire", `{"rule":"slots","key":"k"}`)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Nil(t, m["lease"])
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
}
