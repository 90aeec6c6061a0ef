package servertest

import (
	"context"
	"net"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// RLSClient dials addr, a daemon's gRPC listener.
func RLSClient(t *testing.T, addr net.Addr) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	require.NotNil(t, addr)
	cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc), cc
}

// Desc builds a descriptor from key, value pairs.
func Desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// RLSReq is a request of domain for the descriptors ds.
func RLSReq(domain string, ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// ShouldRL calls ShouldRateLimit and requires a status per descriptor.
func ShouldRL(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	res, err := c.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, res.GetStatuses(), len(req.GetDescriptors()))
	return res
}

// HeaderMap returns headers as a map.
func HeaderMap(hs []*corev3.HeaderValue) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}
