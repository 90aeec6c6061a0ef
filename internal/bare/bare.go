// Package bare holds the front ends' benchmark baselines. Handler, a bare net/http
// handler that reads the request body and answers a fixed POST /v1/check
// body, deciding nothing. edge -bare-baseline serves it for
// scripts/bench-http.sh, and the server's in-process benchmark
// (BenchmarkCheckServer) runs it beside the API, so that both compare the
// API with the same handler. FieldsHandler answers the same body with the
// RateLimit header fields that every /v1/check answer carries, fixed: what
// net/http itself costs for the API's whole answer.
//
//	srv := &http.Server{Handler: http.HandlerFunc(bare.Handler)}
package bare

import (
	"io"
	"net/http"
)

// Body is what Handler answers: a /v1/check response. Never modify it.
var Body = []byte(`{"allowed":true,"rule":"demo","key":"203.0.113.7","limit":10,"remaining":9,"reset_ms":1000,"retry_after_ms":0}` + "\n")

// Handler reads the request body and answers Body as JSON. Safe for
// concurrent use.
func Handler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header()["Content-Type"] = []string{"application/json"}
	_, _ = w.Write(Body)
}

// fields are the header fields of a /v1/check answer (RateLimit-Policy,
// RateLimit, X-RateLimit-Limit, -Remaining, -Reset), fixed, with their
// canonical names. Shared: never modify them.
var fields = [...]struct {
	name string
	val  []string
}{
	{"Ratelimit-Policy", []string{`"demo";q=10;w=10`}},
	{"Ratelimit", []string{`"demo";r=9;t=1`}},
	{"X-Ratelimit-Limit", []string{"10"}},
	{"X-Ratelimit-Remaining", []string{"9"}},
	{"X-Ratelimit-Reset", []string{"1"}},
}

// FieldsHandler is Handler with the header fields of a /v1/check answer,
// fixed. Safe for concurrent use.
func FieldsHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h := w.Header()
	for _, f := range fields {
		h[f.name] = f.val
	}
	h["Content-Type"] = []string{"application/json"}
	_, _ = w.Write(Body)
}
