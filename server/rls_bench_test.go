package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
)

// rlsBenchYAML is benchApp's rule behind the rate limit service.
const rlsBenchYAML = `
nats: {embedded: {listen: "127.0.0.1:-1"}}
listen: {api: "127.0.0.1:0", grpc: "127.0.0.1:0"}
rules: [{name: bench, limit: 1000000000000, window: 1m, scope: node}]
rls: {domains: [{domain: bench, descriptors: [{entries: [remote_address], rule: bench}]}]}
`

// startBenchApp starts an App with listeners on loopback.
func startBenchApp(b *testing.B) *App {
	b.Helper()
	cfg, err := config.Parse([]byte(rlsBenchYAML))
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewCoarse(time.Millisecond)
	b.Cleanup(clk.Stop)
	a, err := New(Options{Config: cfg, Self: testSelf, Clock: clk, WatchInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a
}

// rlsBenchRequests are 10 requests of 100 descriptors each, over the 1000
// keys of the /v1/checks benchmarks.
func rlsBenchRequests() []*rlsv3.RateLimitRequest {
	keys := benchKeys(1000)
	var reqs []*rlsv3.RateLimitRequest
	for j := 0; j < 10; j++ {
		req := &rlsv3.RateLimitRequest{Domain: "bench"}
		for i := 0; i < 100; i++ {
			req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{
				Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: keys[(j*100+i)%len(keys)]}},
			})
		}
		reqs = append(reqs, req)
	}
	return reqs
}

func reportDecisions(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkRLSOneConn decides 100 descriptors per request over one gRPC
// connection on loopback (client and server in this process), one request
// at a time (serial) and from GOMAXPROCS goroutines sharing the connection
// (parallel); beside it, the same 100 decisions as POST /v1/checks over one
// keep-alive HTTP/1.1 connection, one request at a time. decisions/s is
// 100 × requests/s.
func BenchmarkRLSOneConn(b *testing.B) {
	a := startBenchApp(b)
	cc, err := grpc.NewClient(a.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	c := rlsv3.NewRateLimitServiceClient(cc)
	reqs := rlsBenchRequests()
	ctx := context.Background()
	b.Run("rls-serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			res, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Fatal(err, res.GetOverallCode())
			}
			i++
		}
		reportDecisions(b, 100)
	})
	b.Run("rls-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				res, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Error(err, res.GetOverallCode())
					return
				}
				i++
			}
		})
		reportDecisions(b, 100)
	})
	b.Run("checks-serial", func(b *testing.B) {
		bodies := checksBodies(`{"checks":[`) // the same 10 × 100 decisions
		hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
		url := "http://" + a.APIAddr().String() + "/v1/checks"
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			res, err := hc.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				b.Fatal(res.StatusCode)
			}
			i++
		}
		reportDecisions(b, 100)
	})
}

// BenchmarkRLSHandler is ShouldRateLimit with 100 descriptors without the
// network and protobuf decoding (beside BenchmarkChecksHandler): match,
// check, count, statuses, headers.
func BenchmarkRLSHandler(b *testing.B) {
	cfg, err := config.Parse([]byte(rlsBenchYAML))
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewCoarse(0)
	b.Cleanup(clk.Stop)
	a, err := New(Options{Config: cfg, Self: testSelf, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	s := a.rls
	reqs := rlsBenchRequests()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		res, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatal(err)
		}
		i++
	}
	reportDecisions(b, 100)
}
