package spoa

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/server/frontend"
)

// argsOf decodes the arguments of payload's only message.
func argsOf(t testing.TB, payload []byte) []arg {
	t.Helper()
	msgs, _, err := decodeMessages(payload, nil, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	return msgs[0].args
}

func TestOriginOf(t *testing.T) {
	good := req{method: "POST", path: "/api/v1/a%2Fb", host: "app.example.com:8443", src: netip.MustParseAddr("::ffff:192.0.2.7"),
		headers: [][2]string{{"x-api-key", "k"}, {"accept", "a"}, {"accept", "b"}}}
	o, msg := originOf(argsOf(t, checkPayload(good)), true)
	require.Empty(t, msg)
	assert.Equal(t, frontend.Origin{Method: "POST", Path: "/api/v1/a/b", Host: "app.example.com:8443", IP: netip.MustParseAddr("192.0.2.7"), Trusted: true,
		Header: http.Header{"X-Api-Key": {"k"}, "Accept": {"a", "b"}}}, o)

	// kv builds a message from its argument encoders.
	kv := func(args ...func(e *encoder)) []byte {
		e := encoder{max: 1 << 16}
		e.str(MessageName)
		e.raw(byte(len(args)))
		for _, a := range args {
			a(&e)
		}
		return e.b
	}
	str := func(k, v string) func(e *encoder) { return func(e *encoder) { e.kvString(k, v) } }
	typed := func(k string, b ...byte) func(e *encoder) { return func(e *encoder) { e.str(k); e.raw(b...) } }
	bin := func(k string, b []byte) func(e *encoder) {
		return func(e *encoder) { e.str(k); e.raw(dataBinary); e.strBytes(b) }
	}
	hdrs := bin(argHeaders, hdrsBin(nil))
	src := typed(argSrc, dataIPv4, 192, 0, 2, 7)
	tests := []struct {
		name    string
		payload []byte
		msg     string
	}{
		{"src as a string", kv(str(argMethod, "GET"), str(argPath, "/"), typed(argHost, dataNull), str(argSrc, "2001:db8::1"), hdrs), ""},
		{"no arguments", kv(), "argument method missing; geolimit-check takes method, path, host, src and headers"},
		{"no headers", kv(str(argMethod, "GET"), str(argPath, "/"), typed(argHost, dataNull), src), "argument headers missing; geolimit-check takes method, path, host, src and headers"},
		{"unknown argument", kv(str("hdrs", "x")), `argument "hdrs" unknown; geolimit-check takes method, path, host, src and headers`},
		{"argument twice", kv(str(argMethod, "GET"), str(argMethod, "POST")), "argument method sent twice"},
		{"method not a string", kv(typed(argMethod, dataInt32, 3)), "argument method: want a string, got integer"},
		{"method not a token", kv(str(argMethod, "GE T")), `argument method: "GE T" is not an HTTP method`},
		{"empty method", kv(str(argMethod, "")), `argument method: "" is not an HTTP method`},
		{"path not absolute", kv(str(argPath, "api")), `argument path: "api" is not a URL path such as /api/v1`},
		{"path with a query", kv(str(argPath, "/a?b=1")), `argument path: "/a?b=1" is not a URL path such as /api/v1`},
		{"path badly escaped", kv(str(argPath, "/%zz")), `argument path: "/%zz" is not a URL path such as /api/v1`},
		{"host an address", kv(typed(argHost, dataIPv4, 1, 2, 3, 4)), "argument host: want a string or null, got IPv4 address"},
		{"src null", kv(typed(argSrc, dataNull)), "argument src: want an address, got null"},
		{"src not an address", kv(str(argSrc, "localhost")), "argument src: want an address, got string"},
		{"headers as a string", kv(str(argHeaders, "Host: a\r\n\r\n")), "argument headers: want binary (req.hdrs_bin), got string"},
		{"headers truncated", kv(bin(argHeaders, hdrsBin([][2]string{{"a", "b"}})[:4])), "argument headers: header block truncated (raise HAProxy's tune.bufsize, or send fewer headers)"},
		{"headers without their end", kv(bin(argHeaders, []byte{1, 'a', 1, 'b'})), "argument headers: header block truncated (raise HAProxy's tune.bufsize, or send fewer headers)"},
		{"headers with bytes after their end", kv(bin(argHeaders, []byte{0, 0, 1})), "argument headers: header block malformed (an empty name)"},
		{"header value without a name", kv(bin(argHeaders, []byte{0, 1, 'v', 0, 0})), "argument headers: header block malformed (an empty name)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, msg := originOf(argsOf(t, tc.payload), false)
			assert.Equal(t, tc.msg, msg)
		})
	}
}

func TestDecodeMessages(t *testing.T) {
	two := append(checkPayload(req{method: "GET", path: "/a", src: client}), checkPayload(req{method: "PUT", path: "/b", src: client})...)
	msgs, args, err := decodeMessages(two, nil, nil)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	assert.Len(t, args, 10)
	assert.Equal(t, "PUT", string(msgs[1].args[0].v.bytes), "each message has its own arguments")

	for _, cut := range []int{1, 5, 20, len(two) - 1} {
		_, _, err := decodeMessages(two[:cut], nil, nil)
		assert.Error(t, err, "cut at %d", cut)
	}
}

// FuzzNotify feeds arbitrary NOTIFY payloads to the decoder and the
// argument parser: they may refuse anything, but never panic, and what
// they accept is a well-formed origin.
func FuzzNotify(f *testing.F) {
	f.Add(checkPayload(req{method: "POST", path: "/login", host: "h", src: client, headers: [][2]string{{"x-api-key", "k"}}}))
	f.Add(checkPayload(req{method: "GET", path: "/a/../b//c", src: netip.MustParseAddr("2001:db8::1")}))
	f.Add([]byte{})
	f.Add([]byte{14, 'g', 'e', 'o', 'l', 'i', 'm', 'i', 't', '-', 'c', 'h', 'e', 'c', 'k', 255})
	f.Fuzz(func(t *testing.T, p []byte) {
		msgs, _, err := decodeMessages(p, nil, nil)
		if err != nil {
			return
		}
		for _, m := range msgs {
			o, msg := originOf(m.args, true)
			if msg != "" {
				continue
			}
			if !frontend.IsToken(o.Method) || len(o.Path) == 0 || o.Path[0] != '/' || !o.IP.IsValid() || o.Header == nil {
				t.Fatalf("accepted a malformed origin %+v", o)
			}
		}
	})
}

// FuzzFrame feeds arbitrary frames to the frame and HELLO decoders.
func FuzzFrame(f *testing.F) {
	e := encoder{max: 1 << 16}
	e.startFrame(typeHAProxyHello, 0, 0)
	e.raw(helloPayload(16380, true)...)
	b, _ := e.endFrame()
	f.Add(b[4:])
	f.Add([]byte{3, 0, 0, 0, 1, 240, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			return
		}
		d := decoder{b: fr.payload}
		for len(d.b) > 0 && d.err == nil {
			d.kv()
		}
		_, _ = decodeActions(fr.payload)
	})
}
