// Command middleware is a service limited by geolimit's net/http
// middleware, as the README shows it: three requests a minute per client
// address under /api, counted in this process alone (middleware.Standalone).
// It links neither nats-server nor gRPC; `go test ./middleware -run
// TestExampleSize` builds it and checks its size.
//
//	go run ./examples/middleware -addr 127.0.0.1:8000
//	curl -i http://127.0.0.1:8000/api/hello   # the fourth in a minute is 429
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/middleware"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("middleware", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8000", "listen `address`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	lim, err := middleware.New(middleware.Standalone(config.Rule{
		Name:   "api",
		Match:  config.Match{PathPrefix: "/api"},
		Limit:  3,
		Window: config.Duration(time.Minute),
	}))
	if err != nil {
		return err
	}
	if err := lim.Start(ctx); err != nil {
		return err
	}
	defer lim.Close(context.Background())

	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	srv := &http.Server{Addr: *addr, Handler: lim.Handler(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("listening on http://%s", *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
