package rls_test

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec sends a request's bytes as they are (as Envoy does with client
// header bytes) and decodes answers with the standard codec.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.([]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// rawDescRequest is a RateLimitRequest of one descriptor, encoded by hand so
// that its value may be any bytes.
func rawDescRequest(domain, key, value string) []byte {
	var e, d, b []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, key)
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, value)
	d = protowire.AppendTag(d, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, e)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, d)
}

// TestRLSInvalidUTF8IsDecided: a descriptor value that is not valid UTF-8
// (Envoy forwards client header bytes as they came) is decided with its
// bytes as the key, never a failed call that Envoy would let through.
func TestRLSInvalidUTF8IsDecided(t *testing.T) {
	ta := startApp(t, rlsYAML)
	cc, err := grpc.NewClient(ta.App.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{encoding.GetCodecV2("proto")})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	call := func(value string) rlsv3.RateLimitResponse_Code {
		var res rlsv3.RateLimitResponse
		err := cc.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
			rawDescRequest("edge", "remote_address", value), &res)
		require.NoError(t, err)
		return res.GetOverallCode()
	}
	for range 3 {
		require.Equal(t, rlsv3.RateLimitResponse_OK, call("\xff\xfe"))
	}
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, call("\xff\xfe"), "per-ip holds for the invalid bytes")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, call("\xff\xfd"), "other bytes, another key")
	assert.EqualValues(t, 3, ta.KeyTotal("per-ip", "\xff\xfe"))
}
