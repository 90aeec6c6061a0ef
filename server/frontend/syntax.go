package frontend

import "strings"

// The syntax checks of what a proxy describes of a request (forward
// auth's headers, the SPOA's arguments): one place for both.

// IsToken reports whether s is an HTTP token (RFC 9110 section 5.6.2), the
// syntax of a method.
func IsToken[S string | []byte](s S) bool {
	return len(s) > 0 && alnumOr(s, "!#$%&'*+-.^_`|~")
}

// IsHost reports whether s can be a Host value: a name, IPv4 or bracketed
// IPv6 address, with an optional port; no list, space or URL delimiter.
func IsHost(s string) bool {
	return s != "" && len(s) <= 300 && alnumOr(s, "-._~:[]%!$&'()*+;=")
}

// alnumOr reports whether every byte of s is an ASCII letter or digit or
// one of punct.
func alnumOr[S string | []byte](s S, punct string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte(punct, c) >= 0:
		default:
			return false
		}
	}
	return true
}
