package spoa

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

const rulesYAML = `
proxy:
  trusted_proxies: [127.0.0.1/32]
rules:
  - name: login
    match: {path_prefix: /login, methods: [POST]}
    key: ip
    limit: 2
    window: 1m
  - name: per-key
    match: {path_prefix: /api}
    key: header:X-Api-Key
    limit: 100
    window: 1m
    tier: header:X-Tier
    tiers: {gold: {limit: 1000}}
`

var client = netip.MustParseAddr("192.0.2.7")

// startAgent serves an agent for yaml's rules on a loopback port.
func startAgent(t *testing.T, yaml string, cfg Config) (*Agent, string, frontend.Env) {
	t.Helper()
	env, _ := frontendtest.Env(t, yaml)
	a := New(env, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, a.Shutdown(ctx))
		assert.ErrorIs(t, <-done, ErrClosed)
	})
	return a, ln.Addr().String(), env
}

// keyTotal is what this node has counted of key under rule.
func keyTotal(t *testing.T, env frontend.Env, rule, key string) uint64 {
	t.Helper()
	v, err := env.Node.View(env.Clock.Now(), rule, key)
	require.NoError(t, err)
	var sum uint64
	for _, w := range v.Windows {
		sum += w.Total
	}
	return sum
}

func TestAgentDecides(t *testing.T) {
	_, addr, env := startAgent(t, rulesYAML, Config{})
	h := dialAgent(t, addr)
	hello := h.hello()
	assert.Equal(t, map[string]any{"version": "2.0", "max-frame-size": uint64(16380), "capabilities": ""}, hello)

	login := req{method: "POST", path: "/login", host: "app.example.com", src: client}
	for i := range 2 {
		v := h.check(checkPayload(login))
		assert.Equal(t, int64(1), v[varAllowed], "request %d", i)
		assert.Equal(t, `"login";q=2;w=60`, v[varPolicy])
		assert.Equal(t, `"login";r=`+[]string{"1", "0"}[i]+`;t=`+v[varRateLimit].(string)[len(`"login";r=1;t=`):], v[varRateLimit])
		assert.Equal(t, "2", v[varXLimit])
		assert.NotContains(t, v, varRetryAfter)
		assert.NotContains(t, v, varStatus)
	}
	v := h.check(checkPayload(login))
	assert.Equal(t, int64(0), v[varAllowed])
	assert.Equal(t, int64(429), v[varStatus])
	assert.Contains(t, []string{"60", "90", "120"}, v[varRetryAfter], "within two windows")
	assert.Equal(t, v[varRetryAfter], v[varXReset])
	assert.Equal(t, "0", v[varXRemaining])
	assert.Contains(t, v[varBody], `"error":"rate limited","rule":"login"`)
	assert.EqualValues(t, 2, keyTotal(t, env, "login", client.String()), "the denial spent nothing")

	// A rule matches on the decoded, cleaned path.
	v = h.check(checkPayload(req{method: "POST", path: "/x/../%6cogin", src: client}))
	assert.Equal(t, int64(0), v[varAllowed])

	// Headers: keys, and a tier only from a trusted HAProxy (127.0.0.1).
	api := req{method: "GET", path: "/api/items", src: client, headers: [][2]string{{"host", "app"}, {"x-api-key", "k1"}, {"x-tier", "gold"}}}
	v = h.check(checkPayload(api))
	assert.Equal(t, int64(1), v[varAllowed])
	assert.Equal(t, `"per-key";q=1000;w=60`, v[varPolicy], "the tier applies")
	assert.EqualValues(t, 1, keyTotal(t, env, "per-key", "k1"))

	// A key header sent twice is refused, uncounted.
	api.headers = append(api.headers, [2]string{"X-Api-Key", "k2"})
	v = h.check(checkPayload(api))
	assert.Equal(t, map[string]any{varStatus: int64(400), varError: frontend.AmbiguousMsg("X-Api-Key")}, v)
	assert.EqualValues(t, 1, keyTotal(t, env, "per-key", "k1"))
	assert.EqualValues(t, 0, keyTotal(t, env, "per-key", "k2"))
}

func TestAgentTierNeedsTrustedPeer(t *testing.T) {
	_, addr, _ := startAgent(t, rulesYAML[len("\nproxy:\n  trusted_proxies: [127.0.0.1/32]"):], Config{})
	h := dialAgent(t, addr)
	h.hello()
	v := h.check(checkPayload(req{method: "GET", path: "/api", src: client, headers: [][2]string{{"x-api-key", "k1"}, {"x-tier", "gold"}}}))
	assert.Equal(t, `"per-key";q=100;w=60`, v[varPolicy], "HAProxy outside proxy.trusted_proxies names no tier")
}

func TestAgentRefusesBadMessages(t *testing.T) {
	_, addr, env := startAgent(t, rulesYAML, Config{})
	h := dialAgent(t, addr)
	h.hello()
	e := encoder{max: 1 << 16}
	e.str("other-message")
	e.raw(0)
	v := h.check(e.b)
	assert.Equal(t, int64(400), v[varStatus])
	assert.Contains(t, v[varError], `message "other-message" unknown`)

	// Wrong arguments: refused with a reason, nothing counted.
	e = encoder{max: 1 << 16}
	e.str(MessageName)
	e.raw(1)
	e.kvString(argMethod, "POST")
	v = h.check(e.b)
	assert.Equal(t, map[string]any{varStatus: int64(400), varError: MessageName + ": argument path missing; geolimit-check takes method, path, host, src and headers"}, v)
	assert.EqualValues(t, 0, keyTotal(t, env, "login", client.String()))

	// The connection goes on.
	v = h.check(checkPayload(req{method: "POST", path: "/login", src: client}))
	assert.Equal(t, int64(1), v[varAllowed])
}

func TestAgentProtocolErrors(t *testing.T) {
	tests := []struct {
		name   string
		hello  bool
		typ    byte
		flags  uint32
		pay    []byte
		status uint64
	}{
		{"notify before hello", false, typeNotify, flagFin, checkPayload(req{method: "GET", path: "/", src: client}), statusInvalid},
		{"hello without version", false, typeHAProxyHello, flagFin, func() []byte {
			e := encoder{max: 1 << 10}
			e.kvUint32(helloFrameSize, 16380)
			return e.b
		}(), statusNoVersion},
		{"hello of another version", false, typeHAProxyHello, flagFin, func() []byte {
			e := encoder{max: 1 << 10}
			e.kvString(helloVersions, "1.0,3.0")
			e.kvUint32(helloFrameSize, 16380)
			e.kvString(helloCaps, "")
			return e.b
		}(), statusBadVersion},
		{"hello with tiny frames", false, typeHAProxyHello, flagFin, helloPayload(100, false), statusBadFrameSize},
		{"garbage hello", false, typeHAProxyHello, flagFin, []byte{3, 'a'}, statusInvalid},
		{"fragment", true, typeNotify, 0, checkPayload(req{method: "GET", path: "/", src: client}), statusFragmentation},
		{"garbage notify", true, typeNotify, flagFin, []byte{14, 'g', 'e', 'o', 'l', 'i', 'm', 'i', 't', '-', 'c', 'h', 'e', 'c', 'k', 200}, statusInvalid},
		{"unknown frame type", true, 77, flagFin, nil, statusInvalid},
		{"second hello", true, typeHAProxyHello, flagFin, helloPayload(16380, false), statusInvalid},
	}
	_, addr, env := startAgent(t, rulesYAML, Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := dialAgent(t, addr)
			if tc.hello {
				h.hello()
			}
			h.send(tc.typ, tc.flags, tc.pay)
			f := h.recv()
			require.EqualValues(t, typeAgentDisconnect, f.typ)
			assert.Equal(t, tc.status, kvs(t, f.payload)[discStatus], "%v", kvs(t, f.payload))
			_, err := h.nc.Read(make([]byte, 1))
			assert.Error(t, err, "then closed")
		})
	}
	assert.EqualValues(t, 0, keyTotal(t, env, "login", client.String()))
}

func TestAgentFrameTooBig(t *testing.T) {
	_, addr, _ := startAgent(t, rulesYAML, Config{})
	h := dialAgent(t, addr)
	h.hello()
	// A length far past max-frame-size, with no bytes behind it: refused
	// on the length alone, nothing allocated for it.
	_, err := h.nc.Write([]byte{0xff, 0xff, 0xff, 0xf0})
	require.NoError(t, err)
	f := h.recv()
	require.EqualValues(t, typeAgentDisconnect, f.typ)
	assert.EqualValues(t, statusTooBig, kvs(t, f.payload)[discStatus])
}

func TestAgentHealthcheckAndDisconnect(t *testing.T) {
	_, addr, _ := startAgent(t, rulesYAML, Config{})
	h := dialAgent(t, addr)
	h.send(typeHAProxyHello, flagFin, helloPayload(1<<20, true))
	f := h.recv()
	require.EqualValues(t, typeAgentHello, f.typ)
	assert.EqualValues(t, DefaultMaxFrameSize, kvs(t, f.payload)[helloFrameSize], "never more than the agent's")
	_, err := h.nc.Read(make([]byte, 1))
	assert.Error(t, err, "a health check ends after the HELLO")

	h = dialAgent(t, addr)
	h.hello()
	e := encoder{max: 1 << 10}
	e.kvUint32(discStatus, 0)
	e.kvString(discMessage, "normal")
	h.send(typeHAProxyDisconnect, flagFin, e.b)
	f = h.recv()
	require.EqualValues(t, typeAgentDisconnect, f.typ)
	assert.EqualValues(t, statusNormal, kvs(t, f.payload)[discStatus])
}

func TestAgentIdleTimeout(t *testing.T) {
	_, addr, _ := startAgent(t, rulesYAML, Config{IdleTimeout: 50 * time.Millisecond})
	h := dialAgent(t, addr)
	h.hello()
	f := h.recv() // sent once the connection has been idle past IdleTimeout
	require.EqualValues(t, typeAgentDisconnect, f.typ)
	assert.EqualValues(t, statusTimeout, kvs(t, f.payload)[discStatus])
}

func TestShutdownDisconnectsIdleConnections(t *testing.T) {
	env, _ := frontendtest.Env(t, rulesYAML)
	a := New(env, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ln) }()
	h := dialAgent(t, ln.Addr().String())
	h.hello()
	v := h.check(checkPayload(req{method: "POST", path: "/login", src: client}))
	require.Equal(t, int64(1), v[varAllowed])

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, a.Shutdown(ctx))
	assert.ErrorIs(t, <-done, ErrClosed)
	f := h.recv()
	require.EqualValues(t, typeAgentDisconnect, f.typ)
	assert.EqualValues(t, statusNormal, kvs(t, f.payload)[discStatus])
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.Error(t, err, "the listener is closed")
}
