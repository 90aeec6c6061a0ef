// Package bare holds the front ends' benchmark baselines. Handler, a bare net/http
// handler that reads the request body and answers a fixed POST /v1/check
// body, deciding nothing. edge -bare-baseline serves it for
// scripts/bench-http.sh, and the server's in-process benchmark
// (BenchmarkCheckServer) runs it beside the API, so that both compare the
// API with the same handler.
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
