package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/proxy"
)

// BenchmarkMiddlewareShed is the proxy path without the network (the
// middleware of proxy mode before a no-op upstream): nogate is the path
// without the shedder (the baseline), off without a shedding section (the
// requests in flight still counted), idle
// with shedding below its lowest threshold, loaded past it, where each
// request is classified (and goes on: a GET among four classes), latency
// the same with a target latency (each request's duration averaged). Run with
// -count to alternate them.
func BenchmarkMiddlewareShed(b *testing.B) {
	const shedding = `
shedding:
  max_in_flight: 512
  classes:
    - {name: critical, match: {path_prefix: /checkout}}
    - {name: writes, match: {methods: [POST, PUT, DELETE]}}
    - {name: reads, match: {methods: [GET]}}
    - {name: test, match: {host: canary.example.com}}
`
	for _, bc := range []struct {
		name, yaml string
		busy       int
	}{
		{"nogate", "", 0},
		{"off", "", 0},
		{"idle", shedding, 0},
		{"loaded", shedding, 300},
		{"latency", shedding + "  target_latency: 100ms\n", 300}, // loaded, and each request averaged
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := benchApp(b, bc.yaml)
			for range bc.busy {
				a.eng.Shedder().Enter(&frontend.Origin{Method: "POST", Path: "/checkout"})
			}
			next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
			h := a.middleware(next)
			if bc.name == "nogate" {
				env := frontend.Env{Node: a.node, Clock: a.clk, Rules: a.rules, Log: a.log}
				h = proxy.New(env, proxy.Metrics{LatencyMiddleware: a.met.latencyMiddleware}).Middleware(next)
			}
			keys := benchKeys(1000)
			reqs := make([]*http.Request, len(keys))
			for i, k := range keys {
				reqs[i] = httptest.NewRequest("GET", "/cart/items", nil)
				reqs[i].RemoteAddr = k + ":1234"
			}
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}
