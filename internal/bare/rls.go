package bare

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
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

// RLSFields is RLS answering the fields of listen.grpc's answer to one
// descriptor of an allowed request, fixed: the descriptor's current limit,
// remaining and reset, and the RateLimit header fields. It decides
// nothing; what it costs beyond RLS is gRPC's and protobuf's work on the
// larger answer (BenchmarkRLSFloor, "bare-fields").
type RLSFields struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// fieldsResponse is what RLSFields answers, shared: never modified.
var fieldsResponse = &rlsv3.RateLimitResponse{
	OverallCode: rlsv3.RateLimitResponse_OK,
	Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "bench", RequestsPerUnit: 4294967295, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
		LimitRemaining:     4294967295,
		DurationUntilReset: &durationpb.Duration{Seconds: 59, Nanos: 500000000},
	}},
	ResponseHeadersToAdd: []*corev3.HeaderValue{
		{Key: "ratelimit-policy", Value: `"bench";q=1000000000000;w=60`},
		{Key: "ratelimit", Value: `"bench";r=999999999999;t=1`},
		{Key: "x-ratelimit-limit", Value: "1000000000000"},
		{Key: "x-ratelimit-remaining", Value: "999999999999"},
		{Key: "x-ratelimit-reset", Value: "60"},
	},
}

// ShouldRateLimit answers OK with the fields. Safe for concurrent use.
func (RLSFields) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return fieldsResponse, nil
}
