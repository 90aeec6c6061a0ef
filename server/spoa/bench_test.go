package spoa

import (
	"net/netip"
	"testing"

	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

// BenchmarkAnswer decodes and decides an allowed geolimit-check message
// and encodes its ACK: the agent's work per request, without the socket.
func BenchmarkAnswer(b *testing.B) {
	env, _ := frontendtest.Env(b, `
rules:
  - name: per-key
    match: {path_prefix: /api}
    key: header:X-Api-Key
    limit: 1000000000
    window: 1m
`)
	a := New(env, Config{})
	p := checkPayload(req{method: "GET", path: "/api/items", host: "app.example.com", src: client,
		headers: [][2]string{{"host", "app.example.com"}, {"user-agent", "bench"}, {"accept", "*/*"}, {"x-api-key", "k1"}}})
	peer := netip.MustParseAddr("127.0.0.1")
	var msgs []message
	var args []arg
	e := encoder{max: DefaultMaxFrameSize + 4}
	b.ReportAllocs()
	for b.Loop() {
		var err error
		msgs, args, err = decodeMessages(p, msgs[:0], args[:0])
		if err != nil {
			b.Fatal(err)
		}
		e.startFrame(typeAck, 1, 1)
		a.answer(&e, msgs[0], peer)
		if f, ok := e.endFrame(); !ok || len(f) < 100 {
			b.Fatal("no full ACK")
		}
	}
}
