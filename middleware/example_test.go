package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/middleware"
)

// A handler limited to 3 requests a minute per client address: the fourth
// is answered 429 with Retry-After and never reaches the handler.
func ExampleLimiter() {
	lim, err := middleware.New(middleware.Standalone(config.Rule{
		Name:   "api",
		Match:  config.Match{PathPrefix: "/api"},
		Limit:  3,
		Window: config.Duration(time.Minute),
	}))
	if err != nil {
		panic(err)
	}
	if err := lim.Start(context.Background()); err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	srv := httptest.NewServer(lim.Handler(hello))
	defer srv.Close()

	for i := 0; i < 4; i++ {
		resp, err := http.Get(srv.URL + "/api/items")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), resp.Header.Get("Retry-After") != "")
	}
	// Output:
	// 200 2 false
	// 200 1 false
	// 200 0 false
	// 429 0 true
}
