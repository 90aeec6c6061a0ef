package spoa

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The Stream Processing Offload Protocol, version 2.0 (HAProxy's
// doc/SPOE.txt), as far as an agent without pipelining, async or
// fragmentation needs it. Everything here is pure: it decodes and encodes
// byte slices and does no I/O.
//
// A frame is a 32-bit big-endian length and then that many bytes: a type
// byte, 32-bit flags, the stream and frame ids (varints) and a payload.

// Frame types.
const (
	typeHAProxyHello      = 1
	typeHAProxyDisconnect = 2
	typeNotify            = 3
	typeAgentHello        = 101
	typeAgentDisconnect   = 102
	typeAck               = 103
)

// flagFin marks the last frame of a message; without fragmentation every
// frame has it.
const (
	flagFin   = 1
	flagAbort = 2
)

// Typed data: the low 4 bits of the type byte; a boolean's value is bit 4.
const (
	dataNull   = 0
	dataBool   = 1
	dataInt32  = 2
	dataUint32 = 3
	dataInt64  = 4
	dataUint64 = 5
	dataIPv4   = 6
	dataIPv6   = 7
	dataString = 8
	dataBinary = 9

	dataTypeMask = 0x0f
	dataFlagTrue = 0x10
)

// Variable scopes of a set-var action.
const (
	scopeTxn = 2
)

// actionSetVar is the set-var action; it has 3 arguments: scope, name and
// value.
const actionSetVar = 1

// Status codes of a DISCONNECT frame.
const (
	statusNormal         = 0
	statusTimeout        = 2
	statusTooBig         = 3
	statusInvalid        = 4
	statusNoVersion      = 5
	statusNoFrameSize    = 6
	statusNoCapabilities = 7
	statusBadVersion     = 8
	statusBadFrameSize   = 9
	statusFragmentation  = 10
)

// statusText is the message sent with a status code.
var statusText = map[uint32]string{
	statusNormal:         "normal",
	statusTimeout:        "a timeout occurred",
	statusTooBig:         "frame is too big",
	statusInvalid:        "invalid frame received",
	statusNoVersion:      "version value not found",
	statusNoFrameSize:    "max-frame-size value not found",
	statusNoCapabilities: "capabilities value not found",
	statusBadVersion:     "unsupported version",
	statusBadFrameSize:   "max-frame-size too big or too small",
	statusFragmentation:  "payload fragmentation is not supported",
}

// The HELLO handshake.
const (
	// minFrameSize is the smallest max-frame-size SPOP allows.
	minFrameSize     = 256
	spopVersion      = "2.0"
	helloVersions    = "supported-versions"
	helloFrameSize   = "max-frame-size"
	helloCaps        = "capabilities"
	helloHealthcheck = "healthcheck"
	helloVersion     = "version"
	discStatus       = "status-code"
	discMessage      = "message"
)

// Decoding errors. None says more than which part of a frame is wrong:
// the peer gets a DISCONNECT with statusInvalid.
var (
	errShort    = errors.New("spoa: truncated frame")
	errVarint   = errors.New("spoa: varint longer than 10 bytes")
	errDataType = errors.New("spoa: unknown data type")
)

// frame is a decoded frame; payload aliases the buffer it was read into.
type frame struct {
	typ      byte
	flags    uint32
	streamID uint64
	frameID  uint64
	payload  []byte
}

// decodeFrame decodes b, a frame without its length prefix.
func decodeFrame(b []byte) (frame, error) {
	var f frame
	if len(b) < 5 {
		return f, errShort
	}
	f.typ = b[0]
	f.flags = binary.BigEndian.Uint32(b[1:5])
	d := decoder{b: b[5:]}
	f.streamID = d.varint()
	f.frameID = d.varint()
	if d.err != nil {
		return frame{}, d.err
	}
	f.payload = d.b
	return f, nil
}

// decoder reads SPOP values from b. The first error sticks: every later
// read returns zero values, so a caller checks err once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

// varint reads SPOP's variable-length integer: a first byte below 240 is
// the value; else the value goes on in 7-bit groups, each byte with the
// high bit set but the last.
func (d *decoder) varint() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(errShort)
		return 0
	}
	v := uint64(d.b[0])
	if v < 240 {
		d.b = d.b[1:]
		return v
	}
	shift := uint(4)
	for i := 1; ; i++ {
		if i >= len(d.b) {
			d.fail(errShort)
			return 0
		}
		if i >= 10 {
			d.fail(errVarint)
			return 0
		}
		c := uint64(d.b[i])
		v += c << shift
		shift += 7
		if c < 128 {
			d.b = d.b[i+1:]
			return v
		}
	}
}

// bytes reads n bytes; n is checked against what is there, never
// allocated.
func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// str reads a length-prefixed string (or binary) value.
func (d *decoder) str() []byte { return d.bytes(d.varint()) }

func (d *decoder) byte1() byte {
	b := d.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// value is a typed data item; bytes aliases the frame.
type value struct {
	typ   byte
	b     bool
	n     uint64
	bytes []byte
}

// typeName names a data type for messages.
func typeName(t byte) string {
	switch t {
	case dataNull:
		return "null"
	case dataBool:
		return "boolean"
	case dataInt32, dataUint32, dataInt64, dataUint64:
		return "integer"
	case dataIPv4:
		return "IPv4 address"
	case dataIPv6:
		return "IPv6 address"
	case dataString:
		return "string"
	case dataBinary:
		return "binary"
	}
	return fmt.Sprintf("type %d", t)
}

// value reads a typed data item.
func (d *decoder) value() value {
	t := d.byte1()
	v := value{typ: t & dataTypeMask}
	switch v.typ {
	case dataNull:
	case dataBool:
		v.b = t&dataFlagTrue != 0
	case dataInt32, dataUint32, dataInt64, dataUint64:
		v.n = d.varint()
	case dataIPv4:
		v.bytes = d.bytes(4)
	case dataIPv6:
		v.bytes = d.bytes(16)
	case dataString, dataBinary:
		v.bytes = d.str()
	default:
		d.fail(errDataType)
	}
	return v
}

// addr returns an address value's address.
func (v value) addr() (netip.Addr, bool) {
	if v.typ != dataIPv4 && v.typ != dataIPv6 {
		return netip.Addr{}, false
	}
	return netip.AddrFromSlice(v.bytes)
}

// kv reads one entry of a KV-LIST: a name and a typed value.
func (d *decoder) kv() (name []byte, v value) {
	name = d.str()
	v = d.value()
	return name, v
}

// encoder appends SPOP values to b, within max bytes in all: past it,
// full is set and nothing more is written.
type encoder struct {
	b    []byte
	max  int
	full bool
}

func (e *encoder) room(n int) bool {
	if e.full || len(e.b)+n > e.max {
		e.full = true
		return false
	}
	return true
}

func appendVarint(b []byte, v uint64) []byte {
	if v < 240 {
		return append(b, byte(v))
	}
	b = append(b, byte(v)|240)
	v = (v - 240) >> 4
	for v >= 128 {
		b = append(b, byte(v)|128)
		v = (v - 128) >> 7
	}
	return append(b, byte(v))
}

// varintLen is the length of v's encoding.
func varintLen(v uint64) int {
	if v < 240 {
		return 1
	}
	n := 2
	for v = (v - 240) >> 4; v >= 128; v = (v - 128) >> 7 {
		n++
	}
	return n
}

func (e *encoder) varint(v uint64) {
	if e.room(varintLen(v)) {
		e.b = appendVarint(e.b, v)
	}
}

func (e *encoder) str(s string) {
	e.varint(uint64(len(s)))
	if e.room(len(s)) {
		e.b = append(e.b, s...)
	}
}

func (e *encoder) strBytes(s []byte) {
	e.varint(uint64(len(s)))
	if e.room(len(s)) {
		e.b = append(e.b, s...)
	}
}

func (e *encoder) raw(p ...byte) {
	if e.room(len(p)) {
		e.b = append(e.b, p...)
	}
}

func (e *encoder) kvString(name, v string) {
	e.str(name)
	e.raw(dataString)
	e.str(v)
}

func (e *encoder) kvUint32(name string, v uint32) {
	e.str(name)
	e.raw(dataUint32)
	e.varint(uint64(v))
}

// setVarString appends a set-var action of a transaction-scoped string.
func (e *encoder) setVarString(name, v string) {
	e.raw(actionSetVar, 3, scopeTxn)
	e.str(name)
	e.raw(dataString)
	e.str(v)
}

// setVarBytes appends a set-var action of a transaction-scoped string.
func (e *encoder) setVarBytes(name string, v []byte) {
	e.raw(actionSetVar, 3, scopeTxn)
	e.str(name)
	e.raw(dataString)
	e.strBytes(v)
}

// setVarInt appends a set-var action of a transaction-scoped integer.
func (e *encoder) setVarInt(name string, v int64) {
	e.raw(actionSetVar, 3, scopeTxn)
	e.str(name)
	e.raw(dataInt64)
	e.varint(uint64(v))
}

// startFrame starts a frame in e: the length (filled in by endFrame), the
// type, FIN and the ids.
func (e *encoder) startFrame(typ byte, streamID, frameID uint64) {
	e.b = e.b[:0]
	e.full = false
	e.raw(0, 0, 0, 0, typ, 0, 0, 0, flagFin)
	e.varint(streamID)
	e.varint(frameID)
}

// endFrame fills in the length and returns the frame, or false when it
// did not fit in max.
func (e *encoder) endFrame() ([]byte, bool) {
	if e.full {
		return nil, false
	}
	binary.BigEndian.PutUint32(e.b[:4], uint32(len(e.b)-4))
	return e.b, true
}
