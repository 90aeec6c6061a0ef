package spoa

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hap plays HAProxy's side of an SPOP connection (Client), failing the
// test on an error.
type hap struct {
	t  testing.TB
	nc net.Conn
	c  *Client
}

func dialAgent(t testing.TB, addr string) *hap {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &hap{t: t, nc: nc, c: &Client{nc: nc, e: encoder{max: 1 << 20}}}
}

// send writes a frame of the given type and payload.
func (h *hap) send(typ byte, flags uint32, payload []byte) {
	h.t.Helper()
	require.NoError(h.t, h.c.send(typ, flags, payload))
}

// recv reads the agent's next frame.
func (h *hap) recv() frame {
	h.t.Helper()
	f, err := h.c.recv()
	require.NoError(h.t, err)
	return f
}

// kvs decodes a KV-LIST (HELLO, DISCONNECT).
func kvs(t testing.TB, p []byte) map[string]any {
	t.Helper()
	out, err := decodeKVs(p)
	require.NoError(t, err)
	return out
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
	return encodeMessage(Message{Method: r.method, Path: r.path, Host: r.host, Src: r.src, Headers: r.headers})
}

// check sends a NOTIFY and returns the ACK's variables.
func (h *hap) check(payload []byte) map[string]any {
	h.t.Helper()
	h.send(typeNotify, flagFin, payload)
	f := h.recv()
	require.EqualValues(h.t, typeAck, f.typ)
	require.Equal(h.t, h.c.frame, f.frameID, "the ACK names the NOTIFY's frame")
	require.EqualValues(h.t, 1, f.streamID)
	acts, err := decodeActions(f.payload)
	require.NoError(h.t, err)
	return acts
}
