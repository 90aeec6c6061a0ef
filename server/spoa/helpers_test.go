package spoa

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decodeActions reads an ACK's set-var actions into name → value (int64,
// string).
func decodeActions(p []byte) (map[string]any, error) {
	out := map[string]any{}
	d := decoder{b: p}
	for len(d.b) > 0 && d.err == nil {
		typ, n, scope := d.byte1(), d.byte1(), d.byte1()
		if typ != actionSetVar || n != 3 || scope != scopeTxn {
			return nil, fmt.Errorf("action %d with %d args in scope %d", typ, n, scope)
		}
		name := string(d.str())
		v := d.value()
		switch v.typ {
		case dataInt64:
			out[name] = int64(v.n)
		case dataString:
			out[name] = string(v.bytes)
		default:
			return nil, fmt.Errorf("%s: type %d", name, v.typ)
		}
	}
	return out, d.err
}

// hap plays HAProxy's side of an SPOP connection.
type hap struct {
	t     testing.TB
	nc    net.Conn
	e     encoder
	frame uint64
}

func dialAgent(t testing.TB, addr string) *hap {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &hap{t: t, nc: nc, e: encoder{max: 1 << 20}}
}

// send writes a frame of the given type and payload.
func (h *hap) send(typ byte, flags uint32, payload []byte) {
	h.t.Helper()
	h.frame++
	h.e.startFrame(typ, 1, h.frame)
	binary.BigEndian.PutUint32(h.e.b[5:9], flags)
	h.e.raw(payload...)
	b, ok := h.e.endFrame()
	require.True(h.t, ok)
	_, err := h.nc.Write(b)
	require.NoError(h.t, err)
}

// recv reads the agent's next frame.
func (h *hap) recv() frame {
	h.t.Helper()
	var hdr [4]byte
	_, err := io.ReadFull(h.nc, hdr[:])
	require.NoError(h.t, err)
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err = io.ReadFull(h.nc, b)
	require.NoError(h.t, err)
	f, err := decodeFrame(b)
	require.NoError(h.t, err)
	return f
}

// kvs decodes a KV-LIST (HELLO, DISCONNECT).
func kvs(t testing.TB, p []byte) map[string]any {
	t.Helper()
	out := map[string]any{}
	d := decoder{b: p}
	for len(d.b) > 0 && d.err == nil {
		k, v := d.kv()
		switch v.typ {
		case dataString:
			out[string(k)] = string(v.bytes)
		default:
			out[string(k)] = v.n
		}
	}
	require.NoError(t, d.err)
	return out
}

// helloPayload is HAProxy's HELLO.
func helloPayload(frameSize uint32, health bool) []byte {
	e := encoder{max: 1 << 16}
	e.kvString(helloVersions, "2.0")
	e.kvUint32(helloFrameSize, frameSize)
	e.kvString(helloCaps, "pipelining,async")
	e.kvString("engine-id", "test-engine")
	if health {
		e.str(helloHealthcheck)
		e.raw(dataBool | dataFlagTrue)
	}
	return e.b
}

// hello runs the handshake and returns the agent's HELLO.
func (h *hap) hello() map[string]any {
	h.t.Helper()
	h.send(typeHAProxyHello, flagFin, helloPayload(16380, false))
	f := h.recv()
	require.EqualValues(h.t, typeAgentHello, f.typ)
	return kvs(h.t, f.payload)
}

// req describes a geolimit-check message's arguments.
type req struct {
	method, path, host string
	src                netip.Addr
	headers            [][2]string
}

// checkPayload encodes a NOTIFY payload of one geolimit-check message.
func checkPayload(r req) []byte {
	e := encoder{max: 1 << 20}
	e.str(MessageName)
	e.raw(5)
	e.kvString(argMethod, r.method)
	e.kvString(argPath, r.path)
	if r.host == "" {
		e.str(argHost)
		e.raw(dataNull)
	} else {
		e.kvString(argHost, r.host)
	}
	e.str(argSrc)
	if r.src.Is4() {
		e.raw(dataIPv4)
	} else {
		e.raw(dataIPv6)
	}
	e.raw(r.src.AsSlice()...)
	e.str(argHeaders)
	e.raw(dataBinary)
	e.strBytes(hdrsBin(r.headers))
	return e.b
}

// hdrsBin encodes headers as req.hdrs_bin does.
func hdrsBin(hs [][2]string) []byte {
	e := encoder{max: 1 << 20}
	for _, h := range hs {
		e.str(h[0])
		e.str(h[1])
	}
	e.raw(0, 0)
	return e.b
}

// check sends a NOTIFY and returns the ACK's variables.
func (h *hap) check(payload []byte) map[string]any {
	h.t.Helper()
	h.send(typeNotify, flagFin, payload)
	f := h.recv()
	require.EqualValues(h.t, typeAck, f.typ)
	require.Equal(h.t, h.frame, f.frameID, "the ACK names the NOTIFY's frame")
	require.EqualValues(h.t, 1, f.streamID)
	acts, err := decodeActions(f.payload)
	require.NoError(h.t, err)
	return acts
}
