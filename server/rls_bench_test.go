package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/internal/bare"
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
	clk := clock.NewCoarse(time.Millisecond)
	b.Cleanup(clk.Stop)
	return startBenchAppClock(b, clk)
}

// startBenchAppClock is startBenchApp with the clock clk.
func startBenchAppClock(b *testing.B, clk clock.Clock) *App {
	b.Helper()
	cfg, err := config.Parse([]byte(rlsBenchYAML))
	if err != nil {
		b.Fatal(err)
	}
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
	s := benchAppOf(b, nil, rlsBenchYAML).rls
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

// BenchmarkRLSHandlerOne is ShouldRateLimit of one descriptor, as
// BenchmarkRLSFloor sends it, without the network and protobuf: what the
// service adds to gRPC's own work per call.
func BenchmarkRLSHandlerOne(b *testing.B) {
	a := benchAppOf(b, nil, rlsBenchYAML)
	reqs := rlsFloorRequests()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		res, err := a.rls.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			b.Fatal(err)
		}
		i++
	}
}

// rlsFloorRequests are requests of one descriptor each, over the 1000
// keys of the other benchmarks.
func rlsFloorRequests() []*rlsv3.RateLimitRequest {
	var reqs []*rlsv3.RateLimitRequest
	for _, k := range benchKeys(1000) {
		reqs = append(reqs, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: k}}},
		}})
	}
	return reqs
}

// BenchmarkRLSFloor is the rate limit service's floor: ShouldRateLimit of
// one descriptor from 32 concurrent callers over 4 gRPC connections on
// loopback (client and server in this process), answered by a bare
// grpc-go server with a fixed OK (bare.RLS, "bare"), by one answering
// the fields of the service's answer, fixed (bare.RLSFields,
// "bare-fields": what gRPC and protobuf cost for the same answer), and by
// listen.grpc ("rls"). scripts/bench-floors.sh alternates them and prints the ratio of
// their medians (goal: rls at least 0.90 of bare's requests per second).
func BenchmarkRLSFloor(b *testing.B) {
	reqs := rlsFloorRequests()
	b.Run("bare", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		g := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(g, bare.RLS{})
		go func() { _ = g.Serve(ln) }()
		b.Cleanup(g.Stop)
		rlsFloor(b, ln.Addr().String(), reqs)
	})
	b.Run("bare-fields", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		g := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(g, bare.RLSFields{})
		go func() { _ = g.Serve(ln) }()
		b.Cleanup(g.Stop)
		rlsFloor(b, ln.Addr().String(), reqs)
	})
	b.Run("rls", func(b *testing.B) {
		// A clock read per request, as BenchmarkCheckServer's "check".
		rlsFloor(b, startBenchAppClock(b, clock.Real{}).GRPCAddr().String(), reqs)
	})
}

// rlsFloor sends b.N requests, cycling over reqs, from 32 goroutines over
// 4 connections to addr, and fails on any answer but OK.
func rlsFloor(b *testing.B, addr string, reqs []*rlsv3.RateLimitRequest) {
	const conns, callers = 4, 32
	var clients [conns]rlsv3.RateLimitServiceClient
	for i := range clients {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cc.Close() })
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	ctx := context.Background()
	for _, c := range clients { // connect before the clock starts
		if _, err := c.ShouldRateLimit(ctx, reqs[0]); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		id := int(next.Add(1))
		c := clients[id%conns]
		for i := id * 31; pb.Next(); i++ {
			res, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Error(err, res.GetOverallCode())
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
