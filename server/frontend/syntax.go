package frontend

import "strings"

// The syntax checks of what a proxy describes of a request (forward
// auth's headers, the SPOA's arguments): one place for both.

// IsToken reports whether s is an HTTP token (RFC 9110 section 5.6.2), the
// syntax of a method.
func IsToken[S string | []byte](s S) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// IsHost reports whether s can be a Host value: a name, IPv4 or bracketed
// IPv6 address, with an optional port; no list, space or URL delimiter.
func IsHost(s string) bool {
	if s == "" || len(s) > 300 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~:[]%!$&'()*+;=", c) >= 0:
		default:
			return false
		}
	}
	return true
}
