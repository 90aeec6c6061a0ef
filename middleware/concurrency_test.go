package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/middleware"
)

// TestConcurrencyRule: a request holds its slot while the wrapped handler
// serves it, and gives it back when the handler returns, even by a panic.
func TestConcurrencyRule(t *testing.T) {
	lim, err := middleware.New(middleware.Standalone(config.Rule{Name: "slow", Kind: "concurrency", Limit: 1,
		Match: config.Match{PathPrefix: "/slow"}}))
	require.NoError(t, err)
	require.NoError(t, lim.Start(context.Background()))
	t.Cleanup(func() { assert.NoError(t, lim.Close(context.Background())) })
	entered, release := make(chan struct{}, 1), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow/panic" {
			panic(http.ErrAbortHandler)
		}
		entered <- struct{}{}
		<-release
	})
	srv := httptest.NewServer(lim.Handler(next))
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			return 0, ""
		}
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Retry-After")
	}
	inFlight := func() uint64 {
		own, _, _ := lim.App().Node().InFlight(time.Now().UnixNano(), "slow", "127.0.0.1")
		return own
	}

	done := make(chan int, 1)
	go func() { code, _ := get("/slow/a"); done <- code }()
	<-entered
	code, retry := get("/slow/b")
	assert.Equal(t, http.StatusTooManyRequests, code, "the one slot is held")
	assert.Equal(t, "1", retry)
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
	require.Eventually(t, func() bool { return inFlight() == 0 }, 10*time.Second, 5*time.Millisecond)

	code, _ = get("/slow/panic")
	assert.Zero(t, code, "the handler aborted the response")
	require.Eventually(t, func() bool { return inFlight() == 0 }, 10*time.Second, 5*time.Millisecond, "a panic gives the slot back")
	go func() { code, _ := get("/slow/c"); done <- code }()
	<-entered
	assert.Equal(t, http.StatusOK, <-done)
}
