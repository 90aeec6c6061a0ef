package rls

import (
	"errors"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// The standard proto codec, which lenientCodec wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// Envoy copies request header bytes into descriptor values as they came
// from the client, and a proto3 string field must hold valid UTF-8: the
// standard codec refuses such a request whole, and with Envoy's default
// failure_mode_deny: false every limit of the request would then be
// skipped. lenientCodec decodes a RateLimitRequest the standard codec
// refuses for its strings with parseRequest, which takes a string's bytes
// as they are: an invalid value is a key like any other. Everything else is
// the standard codec's.

// lenientCodec is the standard proto codec, with parseRequest as a second
// try for a RateLimitRequest.
type lenientCodec struct{ encoding.CodecV2 }

func newLenientCodec() lenientCodec { return lenientCodec{encoding.GetCodecV2("proto")} }

func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return err
	}
	b := data.Materialize()
	var r rlsv3.RateLimitRequest
	if perr := parseRequest(b, &r); perr != nil {
		return err // the standard codec's error says what is wrong
	}
	req.Domain, req.Descriptors, req.HitsAddend = r.Domain, r.Descriptors, r.HitsAddend
	return nil
}

var errWire = errors.New("rls: malformed request")

// parseRequest decodes a RateLimitRequest (envoy.service.ratelimit.v3)
// from b, taking strings' bytes as they are. Unknown fields, and known ones
// of another wire type, are skipped, as the standard codec keeps them
// unknown; a truncated field is an error.
func parseRequest(b []byte, r *rlsv3.RateLimitRequest) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			d := &rlcommonv3.RateLimitDescriptor{}
			if err := parseDescriptor(v, d); err != nil {
				return err
			}
			r.Descriptors = append(r.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			r.HitsAddend = uint32(x)
		}
		return nil
	})
}

// parseDescriptor decodes a RateLimitDescriptor: its entries, hits_addend
// and is_negative_hits (limit overrides are not read by this service).
func parseDescriptor(b []byte, d *rlcommonv3.RateLimitDescriptor) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := &rlcommonv3.RateLimitDescriptor_Entry{}
			err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Key = string(v)
				case num == 2 && typ == protowire.BytesType:
					e.Value = string(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.Entries = append(d.Entries, e)
		case num == 3 && typ == protowire.BytesType:
			// A message field sent twice merges, as the standard codec
			// merges it: a later empty one keeps the value.
			h := d.HitsAddend
			if h == nil {
				h = &wrapperspb.UInt64Value{}
			}
			err := fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					h.Value = x
				}
				return nil
			})
			if err != nil {
				return err
			}
			d.HitsAddend = h
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = x != 0
		}
		return nil
	})
}

// fields calls fn for every field of the message b: its number, wire type,
// and its bytes (length-delimited) or value (varint, fixed). Groups are
// skipped.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default: // a group: skipped whole, as an unknown field
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errWire
			}
			b = b[n:]
			continue
		}
		if n < 0 {
			return errWire
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
