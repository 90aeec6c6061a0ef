package spoa

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
)

// Client plays HAProxy's side of an SPOP connection to an agent: one
// HELLO, then one geolimit-check message at a time. It is what the
// daemon's tests use to ask the agent as HAProxy would, and a way to probe
// a running agent. Not safe for concurrent use.
type Client struct {
	nc    net.Conn
	e     encoder
	frame uint64
}

// Message is a geolimit-check message's arguments, as the SPOE
// configuration sends them.
type Message struct {
	Method, Path string
	// Host is the Host header; empty sends null.
	Host string
	// Src is the client's address.
	Src netip.Addr
	// Headers are the request's headers, in order (req.hdrs_bin).
	Headers [][2]string
}

// NewClient returns a client on the connection nc, after the handshake
// (HELLO): the agent's HELLO is returned as name → value.
func NewClient(nc net.Conn) (*Client, map[string]any, error) {
	c := &Client{nc: nc, e: encoder{max: 1 << 20}}
	if err := c.send(typeHAProxyHello, flagFin, helloPayload(DefaultMaxFrameSize, false)); err != nil {
		return nil, nil, err
	}
	f, err := c.recv()
	if err != nil {
		return nil, nil, err
	}
	if f.typ != typeAgentHello {
		return nil, nil, fmt.Errorf("spoa: client: want the agent's HELLO, got frame type %d", f.typ)
	}
	hello, err := decodeKVs(f.payload)
	return c, hello, err
}

// Check sends the message m in a NOTIFY and returns the variables the
// agent's ACK sets, name → value (int64 or string).
func (c *Client) Check(m Message) (map[string]any, error) {
	if err := c.send(typeNotify, flagFin, encodeMessage(m)); err != nil {
		return nil, err
	}
	f, err := c.recv()
	if err != nil {
		return nil, err
	}
	if f.typ != typeAck || f.frameID != c.frame || f.streamID != 1 {
		return nil, fmt.Errorf("spoa: client: want the ACK of frame %d on stream 1, got type %d frame %d stream %d", c.frame, f.typ, f.frameID, f.streamID)
	}
	return decodeActions(f.payload)
}

// send writes a frame of type typ with flags and payload, on stream 1 and
// the next frame id.
func (c *Client) send(typ byte, flags uint32, payload []byte) error {
	c.frame++
	c.e.startFrame(typ, 1, c.frame)
	binary.BigEndian.PutUint32(c.e.b[5:9], flags)
	c.e.raw(payload...)
	b, ok := c.e.endFrame()
	if !ok {
		return errors.New("spoa: client: frame too large")
	}
	_, err := c.nc.Write(b)
	return err
}

// recv reads the agent's next frame.
func (c *Client) recv() (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return frame{}, fmt.Errorf("spoa: client: frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.nc, b); err != nil {
		return frame{}, err
	}
	return decodeFrame(b)
}

// decodeActions reads an ACK's set-var actions into name → value (int64,
// string).
func decodeActions(p []byte) (map[string]any, error) {
	out := map[string]any{}
	d := decoder{b: p}
	for len(d.b) > 0 && d.err == nil {
		typ, n, scope := d.byte1(), d.byte1(), d.byte1()
		if typ != actionSetVar || n != 3 || scope != scopeTxn {
			return nil, fmt.Errorf("spoa: client: action %d with %d args in scope %d", typ, n, scope)
		}
		name := string(d.str())
		v := d.value()
		switch v.typ {
		case dataInt64:
			out[name] = int64(v.n)
		case dataString:
			out[name] = string(v.bytes)
		default:
			return nil, fmt.Errorf("spoa: client: %s: type %d", name, v.typ)
		}
	}
	return out, d.err
}

// decodeKVs decodes a KV-LIST (HELLO, DISCONNECT).
func decodeKVs(p []byte) (map[string]any, error) {
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
	return out, d.err
}

// helloPayload is HAProxy's HELLO.
func helloPayload(frameSize uint32, health bool) []byte {
	e := encoder{max: 1 << 16}
	e.kvString(helloVersions, "2.0")
	e.kvUint32(helloFrameSize, frameSize)
	e.kvString(helloCaps, "pipelining,async")
	e.kvString("engine-id", "geolimit-client")
	if health {
		e.str(helloHealthcheck)
		e.raw(dataBool | dataFlagTrue)
	}
	return e.b
}

// encodeMessage encodes a NOTIFY payload of one geolimit-check message.
func encodeMessage(m Message) []byte {
	e := encoder{max: 1 << 20}
	e.str(MessageName)
	e.raw(5)
	e.kvString(argMethod, m.Method)
	e.kvString(argPath, m.Path)
	if m.Host == "" {
		e.str(argHost)
		e.raw(dataNull)
	} else {
		e.kvString(argHost, m.Host)
	}
	e.str(argSrc)
	if m.Src.Is4() {
		e.raw(dataIPv4)
	} else {
		e.raw(dataIPv6)
	}
	e.raw(m.Src.AsSlice()...)
	e.str(argHeaders)
	e.raw(dataBinary)
	e.strBytes(hdrsBin(m.Headers))
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
