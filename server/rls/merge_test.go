package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A singular message field sent twice is merged by the standard codec, and
// so by parseRequest. A descriptor whose hits_addend comes as
// {value: 5} then {} is a cost of 5 to the standard codec and a probe
// (hits_addend 0: never counted) to the fallback.
func TestParseRequestMergesLikeProto(t *testing.T) {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, "k")
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, "v")
	var ha []byte
	ha = protowire.AppendTag(ha, 1, protowire.VarintType)
	ha = protowire.AppendVarint(ha, 5)
	var d []byte
	d = protowire.AppendTag(d, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, e)
	d = protowire.AppendTag(d, 3, protowire.BytesType)
	d = protowire.AppendBytes(d, ha)
	d = protowire.AppendTag(d, 3, protowire.BytesType)
	d = protowire.AppendBytes(d, nil) // an empty UInt64Value: merges to nothing
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "edge")
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, d)

	var std rlsv3.RateLimitRequest
	require.NoError(t, proto.Unmarshal(b, &std))
	var got rlsv3.RateLimitRequest
	require.NoError(t, parseRequest(b, &got))
	assert.Equal(t, std.GetDescriptors()[0].GetHitsAddend().GetValue(), got.GetDescriptors()[0].GetHitsAddend().GetValue(),
		"the same descriptor decoded two ways: cost 5 vs probe")
}
