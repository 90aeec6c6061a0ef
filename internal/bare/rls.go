package bare

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// RLS is the rate limit service's baseline: a bare grpc-go
// RateLimitService that answers every ShouldRateLimit with a fixed OK of
// one descriptor status, deciding nothing. The server's BenchmarkRLSFloor
// runs it beside listen.grpc (scripts/bench-floors.sh).
//
//	g := grpc.NewServer()
//	rlsv3.RegisterRateLimitServiceServer(g, bare.RLS{})
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// okResponse is what RLS answers, shared: never modified.
var okResponse = &rlsv3.RateLimitResponse{
	OverallCode: rlsv3.RateLimitResponse_OK,
	Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}},
}

// ShouldRateLimit answers OK. Safe for concurrent use.
func (RLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return okResponse, nil
}
