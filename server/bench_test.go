package server

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
)

// nopWriter is a reusable http.ResponseWriter that discards the body.
type nopWriter struct {
	h    http.Header
	code int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.code = code }

// bodyReader is a resettable request body.
type bodyReader struct {
	b []byte
	i int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}
func (r *bodyReader) Close() error { return nil }

func benchApp(b testing.TB, extraYAML ...string) *App {
	b.Helper()
	clk := clock.NewCoarse(0)
	b.Cleanup(clk.Stop)
	return benchAppClock(b, clk, extraYAML...)
}

// benchAppClock is benchApp with the clock clk.
func benchAppClock(b testing.TB, clk clock.Clock, extraYAML ...string) *App {
	b.Helper()
	return benchAppOf(b, clk, "rules: [{name: bench, limit: 1000000000000, window: 1m, scope: node}]\n"+strings.Join(extraYAML, ""))
}

// benchAppOf is a daemon of the config yaml, whole, on the clock clk (a
// coarse one when nil), not listening: for benchmarks of its handlers.
func benchAppOf(b testing.TB, clk clock.Clock, yaml string) *App {
	b.Helper()
	if clk == nil {
		c := clock.NewCoarse(0)
		b.Cleanup(c.Stop)
		clk = c
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(Options{Config: cfg, Self: testSelf, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	return keys
}

// BenchmarkCheckHandler is POST /v1/check without the network: parse,
// decide, headers, body.
func BenchmarkCheckHandler(b *testing.B) {
	a := benchApp(b)
	bodies := [][]byte{}
	for _, k := range benchKeys(1000) {
		bodies = append(bodies, []byte(`{"rule":"bench","key":"`+k+`","cost":1}`))
	}
	serveBodies(b, a, "/v1/check", bodies)
}

// BenchmarkChecksHandler is POST /v1/checks with 100 checks; ns/op / 100 is
// the cost of one decision.
func BenchmarkChecksHandler(b *testing.B) {
	serveBodies(b, benchApp(b), "/v1/checks", checksBodies(`{"checks":[`))
}

// BenchmarkChecksHandlerAtomic is BenchmarkChecksHandler with "atomic":
// true: every check is peeked, then counted.
func BenchmarkChecksHandlerAtomic(b *testing.B) {
	serveBodies(b, benchApp(b), "/v1/checks", checksBodies(`{"atomic":true,"checks":[`))
}

// BenchmarkChecksHandlerManyKeys is BenchmarkChecksHandler over 100k keys
// in a shuffled order, which do not stay in the CPU's caches (what the
// pipeline's prefetch of a batch's keys ahead is for; pop's
// BenchmarkDecideBatch measures it with and without).
func BenchmarkChecksHandlerManyKeys(b *testing.B) {
	serveBodies(b, benchApp(b), "/v1/checks", keyBodies(`{"checks":[`, 100_000, 1000))
}

// checksBodies returns 10 bodies of 100 checks over 1000 keys, each
// starting with head.
func checksBodies(head string) [][]byte {
	return keyBodies(head, 1000, 10)
}

// A batch's allocations do not grow with its checks: a key copied per
// check would be 100 more for a batch of 100 (a key passed to the node
// core must not escape).
func TestChecksAllocationsDoNotGrowWithTheBatch(t *testing.T) {
	for _, head := range []string{`{"checks":[`, `{"atomic":true,"checks":[`} {
		a := benchApp(t)
		h := a.apiHandler()
		allocs := func(body []byte) float64 {
			return testing.AllocsPerRun(50, func() {
				req, _ := http.NewRequestWithContext(context.Background(), "POST", "/v1/checks", nil)
				req.Body, req.ContentLength = &bodyReader{b: body}, int64(len(body))
				w := &nopWriter{h: http.Header{}}
				h.ServeHTTP(w, req)
				if w.code != 200 {
					t.Fatal(w.code)
				}
			})
		}
		one := allocs([]byte(head + `{"rule":"bench","key":"10.1.2.3"}]}`))
		hundred := allocs(keyBodies(head, 1000, 1)[0])
		// Fewer than one per check, not equal: the race detector's builds
		// allocate a few more in the standard library.
		if hundred-one >= 50 {
			t.Errorf("%s: %v allocations for 100 checks, %v for one", head, hundred, one)
		}
	}
}

// keyBodies returns n bodies of 100 checks over the given number of keys,
// taken in a seeded shuffled order, each starting with head.
func keyBodies(head string, nkeys, n int) [][]byte {
	keys := benchKeys(nkeys)
	if nkeys > 1000 {
		rng := rand.New(rand.NewPCG(1, 1))
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	var bodies [][]byte
	for j := 0; j < n; j++ {
		var sb strings.Builder
		sb.WriteString(head)
		for i := 0; i < 100; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"rule":"bench","key":"` + keys[(j*100+i)%len(keys)] + `"}`)
		}
		sb.WriteString(`]}`)
		bodies = append(bodies, []byte(sb.String()))
	}
	return bodies
}

// BenchmarkCheckHandlerAuth is BenchmarkCheckHandler without and with
// api.token_file (two tokens, the request bearing the second), in the same
// run: the cost of the bearer check.
func BenchmarkCheckHandlerAuth(b *testing.B) {
	var bodies [][]byte
	for _, k := range benchKeys(1000) {
		bodies = append(bodies, []byte(`{"rule":"bench","key":"`+k+`","cost":1}`))
	}
	b.Run("no-token", func(b *testing.B) {
		serveBodies(b, benchApp(b), "/v1/check", bodies)
	})
	b.Run("token", func(b *testing.B) {
		p := filepath.Join(b.TempDir(), "api-token")
		if err := os.WriteFile(p, []byte(benchToken1+"\n"+benchToken2+"\n"), 0o600); err != nil {
			b.Fatal(err)
		}
		serveBodies(b, benchApp(b, "api: {token_file: "+p+"}\n"), "/v1/check", bodies, "Authorization", "Bearer "+benchToken2)
	})
}

const (
	benchToken1 = "Zmlyc3QtdG9rZW4tMDEyMzQ1Njc4OWFiY2RlZjAxMjM="
	benchToken2 = "c2Vjb25kLXRva2VuLTAxMjM0NTY3ODlhYmNkZWYwMTI="
)

// serveBodies posts the bodies in turn to path on the API handler, in
// process, with the header pairs hdr, and fails on any answer but 200.
func serveBodies(b *testing.B, a *App, path string, bodies [][]byte, hdr ...string) {
	h := a.apiHandler()
	req, _ := http.NewRequestWithContext(context.Background(), "POST", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	br := &bodyReader{}
	req.Body = br
	w := &nopWriter{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		br.b, br.i = bodies[i%len(bodies)], 0
		req.ContentLength = int64(len(br.b))
		w.h = http.Header{}
		h.ServeHTTP(w, req)
		if w.code != 200 {
			b.Fatal(w.code)
		}
		i++
	}
}
