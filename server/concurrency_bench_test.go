package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkMiddlewareConcurrency is the middleware without the network
// around an empty handler: a request under a rate rule, and the same with
// a concurrency rule beside it (a slot held while the handler runs and
// given back after).
func BenchmarkMiddlewareConcurrency(b *testing.B) {
	for _, tc := range []struct{ name, rules string }{
		{"rate", "rules: [{name: rate, limit: 1000000000000, window: 1m, scope: node}]\n"},
		{"rate+concurrency", "rules: [{name: rate, limit: 1000000000000, window: 1m, scope: node}, {name: conc, kind: concurrency, limit: 1000, scope: pop}]\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			a := benchAppOf(b, nil, tc.rules)
			h := a.middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			keys := benchKeys(1000)
			reqs := make([]*http.Request, len(keys))
			for i, k := range keys {
				reqs[i] = httptest.NewRequest(http.MethodGet, "/x", nil)
				reqs[i].RemoteAddr = k + ":1234"
			}
			w := &nopWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatal(w.code)
				}
			}
		})
	}
}
