package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// checkAddr checks a host:port listen address; with randomOK, port -1 is
// accepted (pick a free port).
func checkAddr(addr string, randomOK bool) error {
	if addr == "" {
		return errors.New("required (host:port)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v", addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	p, err := strconv.Atoi(port)
	if err != nil && port != "" {
		if _, lerr := net.LookupPort("tcp", port); lerr == nil {
			return nil
		}
	}
	if err != nil || p > 65535 || p < -1 || (p == -1 && !randomOK) {
		return fmt.Errorf("%q: bad port %q", addr, port)
	}
	return nil
}

// ParsePrefixes parses trusted-proxy entries: CIDRs or single addresses.
// Errors read "trusted_proxies[i]: ...".
func ParsePrefixes(entries []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	for i, e := range entries {
		var p netip.Prefix
		var err error
		if strings.Contains(e, "/") {
			p, err = netip.ParsePrefix(e)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(e)
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("trusted_proxies[%d]: %q is not an address or CIDR", i, e)
		}
		p = p.Masked()
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		out = append(out, p)
	}
	return out, nil
}
