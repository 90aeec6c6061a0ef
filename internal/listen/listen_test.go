package listen

import "testing"

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true, "::ffff:127.0.0.1": true,
		"": false, "0.0.0.0": false, "::": false, "[::]": false, "10.0.0.1": false, "192.0.2.1": false,
		"localhost": false, "nats.example.net": false, "128.0.0.1": false, "[127.0.0.1": false,
	} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:7946": true, "[::1]:7946": true, "[::ffff:127.0.0.1]:1": true,
		"localhost:8080": false, "0.0.0.0:7946": false, ":7946": false, "10.0.0.11:7946": false,
		"127.0.0.1": false, // no port: does not split
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
