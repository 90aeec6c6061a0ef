package rls

import (
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rawRequest encodes a request whose strings may be any bytes, as Envoy
// sends them.
func rawRequest(domain string, hits uint32, descs ...[]string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, kv := range descs {
		var d []byte
		for i := 0; i+1 < len(kv); i += 2 {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, kv[i])
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, kv[i+1])
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, e)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	if hits > 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(hits))
	}
	return b
}

func TestParseRequestTakesBytesAsTheyAre(t *testing.T) {
	b := rawRequest("edge", 2, []string{"remote_address", "\xff\xfe"}, []string{"user", "caf\xc3"})
	var std rlsv3.RateLimitRequest
	require.Error(t, proto.Unmarshal(b, &std), "the standard codec refuses it")
	var r rlsv3.RateLimitRequest
	require.NoError(t, parseRequest(b, &r))
	assert.Equal(t, "edge", r.GetDomain())
	assert.Equal(t, uint32(2), r.GetHitsAddend())
	require.Len(t, r.GetDescriptors(), 2)
	assert.Equal(t, "\xff\xfe", r.GetDescriptors()[0].GetEntries()[0].GetValue())
	assert.Equal(t, "caf\xc3", r.GetDescriptors()[1].GetEntries()[0].GetValue())

	for _, bad := range [][]byte{b[:len(b)-3], {0x12, 0x05, 0x0a}, {0x0c}, {0x0a, 0x05, 0x01}} {
		assert.Error(t, parseRequest(bad, &rlsv3.RateLimitRequest{}), "% x", bad)
	}
}

// FuzzParseRequest: on any input parseRequest never panics, and on what
// the standard codec accepts it decodes the same request.
func FuzzParseRequest(f *testing.F) {
	full, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{
		{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}, {Key: "user", Value: "u"}},
			HitsAddend: wrapperspb.UInt64(7), IsNegativeHits: true,
			Limit: &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}},
	}})
	f.Add(full)
	f.Add(rawRequest("edge", 0, []string{"a", "\xff"}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got rlsv3.RateLimitRequest
		perr := parseRequest(b, &got)
		var want rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		require.NoError(t, perr)
		require.Equal(t, want.GetDomain(), got.GetDomain())
		require.Equal(t, want.GetHitsAddend(), got.GetHitsAddend())
		require.Len(t, got.GetDescriptors(), len(want.GetDescriptors()))
		for i, d := range want.GetDescriptors() {
			g := got.GetDescriptors()[i]
			require.Equal(t, d.GetHitsAddend().GetValue(), g.GetHitsAddend().GetValue())
			require.Equal(t, d.GetHitsAddend() != nil, g.GetHitsAddend() != nil)
			require.Equal(t, d.GetIsNegativeHits(), g.GetIsNegativeHits())
			require.Len(t, g.GetEntries(), len(d.GetEntries()))
			for j, e := range d.GetEntries() {
				require.Equal(t, e.GetKey(), g.GetEntries()[j].GetKey())
				require.Equal(t, e.GetValue(), g.GetEntries()[j].GetValue())
			}
		}
	})
}
