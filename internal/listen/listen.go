// Package listen holds the one rule geolimit applies to every listener it
// opens or configures (API, gossip, the embedded NATS server's ports): which
// addresses stay on the machine. A listener that does not must be
// authenticated unless the operator writes insecure: true for it.
package listen

import (
	"net"
	"net/netip"
)

// IsLoopbackHost reports whether a listen host stays on the machine: a
// literal address of 127.0.0.0/8 or ::1 (brackets allowed, IPv4-mapped
// forms too). An empty host, a wildcard (0.0.0.0, ::) and every host name
// count as beyond loopback, "localhost" included: what a name resolves to
// is up to the resolver, and memberlist binds a name it cannot parse as an
// address to every interface.
func IsLoopbackHost(host string) bool {
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// IsLoopback is IsLoopbackHost for a host:port address; an address that
// does not split counts as beyond loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && IsLoopbackHost(host)
}
