package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/geolimit/geolimit/internal/bare"
)

// bareBody is what the baseline answers: a /v1/check response.
var bareBody = bare.Body

// runBare serves the benchmark baseline (package bare): a bare net/http
// handler that reads the request body and returns a fixed /v1/check
// answer, with no decision, so that scripts/bench-http.sh can compare the
// real API against it.
func runBare(ctx context.Context, addr string, stdout io.Writer, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-bare-listen: %w", err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(bare.Handler),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	fmt.Fprintf(stdout, "bare baseline listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("bare baseline stopped")
	return nil
}
