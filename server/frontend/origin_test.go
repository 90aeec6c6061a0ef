package frontend

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/geolimit/geolimit/config"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClientIP(t *testing.T) {
	trusted, err := config.ParsePrefixes([]string{"127.0.0.1", "10.0.0.0/8", "::1", "fd00::/8"})
	require.NoError(t, err)
	tests := []struct {
		name   string
		remote string
		xff    []string
		want   string
	}{
		{"untrusted peer, spoofed header", "203.0.113.5:4000", []string{"1.2.3.4"}, "203.0.113.5"},
		{"untrusted peer, no header", "203.0.113.5:4000", nil, "203.0.113.5"},
		{"trusted peer, no header", "127.0.0.1:4000", nil, "127.0.0.1"},
		{"trusted peer, one hop", "127.0.0.1:4000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"spoofed left entries ignored", "127.0.0.1:4000", []string{"1.2.3.4, 5.6.7.8, 198.51.100.9"}, "198.51.100.9"},
		{"trusted hops skipped", "127.0.0.1:4000", []string{"1.2.3.4, 198.51.100.9, 10.0.0.7, 10.9.9.9"}, "198.51.100.9"},
		{"several header lines", "127.0.0.1:4000", []string{"1.2.3.4", "198.51.100.9, 10.0.0.7"}, "198.51.100.9"},
		{"all trusted: leftmost", "127.0.0.1:4000", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"garbage stops at the reporting hop", "127.0.0.1:4000", []string{"198.51.100.9, garbage"}, "127.0.0.1"},
		{"garbage behind a trusted hop", "127.0.0.1:4000", []string{"garbage, 10.0.0.7"}, "10.0.0.7"},
		{"spoof with spaces and empties", "127.0.0.1:4000", []string{" 1.2.3.4 ,, 198.51.100.9 , "}, "198.51.100.9"},
		{"hop with port", "127.0.0.1:4000", []string{"198.51.100.9:5555"}, "198.51.100.9"},
		{"IPv6 hop with port", "127.0.0.1:4000", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"IPv6 peer trusted", "[::1]:4000", []string{"2001:db8::2"}, "2001:db8::2"},
		{"IPv4-mapped hop", "127.0.0.1:4000", []string{"::ffff:198.51.100.9"}, "198.51.100.9"},
		{"IPv4-mapped trusted peer", "[::ffff:127.0.0.1]:4000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"IPv6 zone dropped", "[fe80::1%eth0]:4000", nil, "fe80::1"},
		{"trusted v6 range", "[fd00::5]:1", []string{"2001:db8::3, fd00::9"}, "2001:db8::3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got, _ := ClientIP(r, trusted)
			assert.Equal(t, netip.MustParseAddr(tt.want), got)
		})
	}
}

func TestRulePath(t *testing.T) {
	for in, want := range map[string]string{
		"/":              "/",
		"/api/v1":        "/api/v1",
		"/api/v1/":       "/api/v1/",
		"/.well-known/x": "/.well-known/x",
		"/a/..b/c.":      "/a/..b/c.",
		"/x/../api/v1":   "/api/v1",
		"/../api":        "/api",
		"/api/./v1":      "/api/v1",
		"//api//v1":      "/api/v1",
		"/api/v1/..":     "/api/",
		"/api/.":         "/api/",
		"/api//":         "/api/",
		"/..":            "/",
		"//":             "/",
		"*":              "*",
		"":               "",
	} {
		assert.Equal(t, want, RulePath(in), "%q", in)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = RulePath("/api/v1/users/42") }))
}
