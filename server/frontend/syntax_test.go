package frontend

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSyntax(t *testing.T) {
	for s, want := range map[string]bool{"GET": true, "M-SEARCH": true, "": false, "GE T": false, "GET\n": false, "é": false} {
		assert.Equal(t, want, IsToken(s), "%q", s)
		assert.Equal(t, want, IsToken([]byte(s)), "%q as bytes", s)
	}
	for s, want := range map[string]bool{"example.com": true, "[::1]:8080": true, "a.b:80": true, "": false, "a b": false, "a,b": false, "a/b": false} {
		assert.Equal(t, want, IsHost(s), "%q", s)
	}
}
