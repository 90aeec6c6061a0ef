package spoa

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVarint(t *testing.T) {
	tests := []struct {
		name string
		v    uint64
		enc  []byte
	}{
		{"zero", 0, []byte{0}},
		{"one byte max", 239, []byte{239}},
		{"two bytes min", 240, []byte{240, 0}},
		{"two bytes max", 2287, []byte{255, 127}},
		{"three bytes min", 2288, []byte{240, 128, 0}},
		{"max-frame-size 16380", 16380, appendVarint(nil, 16380)},
		{"max uint64", math.MaxUint64, appendVarint(nil, math.MaxUint64)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := appendVarint(nil, tc.v)
			assert.Equal(t, tc.enc, b)
			assert.Equal(t, len(b), varintLen(tc.v))
			d := decoder{b: append(b, 7)}
			assert.Equal(t, tc.v, d.varint())
			require.NoError(t, d.err)
			assert.Equal(t, []byte{7}, d.b, "reads its own bytes only")
		})
	}
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	for range 10000 {
		v := r.Uint64() >> r.IntN(64)
		d := decoder{b: appendVarint(nil, v)}
		require.Equal(t, v, d.varint(), "seed %d", seed)
		require.Equal(t, varintLen(v), len(appendVarint(nil, v)), "seed %d", seed)
	}
}

func TestDecoderRefusesWhatIsNotThere(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		read func(d *decoder)
		want error
	}{
		{"empty varint", nil, func(d *decoder) { d.varint() }, errShort},
		{"varint cut", []byte{240, 128}, func(d *decoder) { d.varint() }, errShort},
		{"varint endless", []byte{255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 0}, func(d *decoder) { d.varint() }, errVarint},
		{"string longer than the frame", []byte{240, 200, 3, 'a'}, func(d *decoder) { d.str() }, errShort},
		{"string length near 2^64", append(appendVarint(nil, math.MaxUint64), 'a'), func(d *decoder) { d.str() }, errShort},
		{"ipv4 cut", []byte{dataIPv4, 127, 0}, func(d *decoder) { d.value() }, errShort},
		{"ipv6 cut", []byte{dataIPv6, 0, 0, 0}, func(d *decoder) { d.value() }, errShort},
		{"unknown type", []byte{12}, func(d *decoder) { d.value() }, errDataType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := decoder{b: tc.b}
			tc.read(&d)
			assert.ErrorIs(t, d.err, tc.want)
			assert.Equal(t, uint64(0), d.varint(), "the error sticks")
			assert.Nil(t, d.str())
		})
	}
}

func TestEncoderStaysWithinMax(t *testing.T) {
	e := encoder{max: 4 + 30}
	e.startFrame(typeAck, 1, 2)
	e.setVarInt("allowed", 1)
	_, ok := e.endFrame()
	require.True(t, ok)
	e.setVarString("body", string(make([]byte, 100)))
	_, ok = e.endFrame()
	assert.False(t, ok, "past max")
	assert.LessOrEqual(t, len(e.b), e.max)
}

func TestFrameRoundTrip(t *testing.T) {
	e := encoder{max: 1 << 16}
	e.startFrame(typeAck, 300, 70000)
	e.setVarString("ratelimit", `"api";r=3;t=1`)
	b, ok := e.endFrame()
	require.True(t, ok)
	f, err := decodeFrame(b[4:])
	require.NoError(t, err)
	assert.Equal(t, frame{typ: typeAck, flags: flagFin, streamID: 300, frameID: 70000, payload: f.payload}, f)
	acts, err := decodeActions(f.payload)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"ratelimit": `"api";r=3;t=1`}, acts)

	_, err = decodeFrame([]byte{3, 0, 0})
	assert.ErrorIs(t, err, errShort)
	_, err = decodeFrame([]byte{3, 0, 0, 0, 1, 240})
	assert.ErrorIs(t, err, errShort)
}
