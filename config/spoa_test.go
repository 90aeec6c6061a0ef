package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSPOAListener(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"off by default", "", ""},
		{"loopback", "listen: {spoa: 127.0.0.1:12345}", ""},
		{"ipv6 loopback", "listen: {spoa: '[::1]:12345'}", ""},
		{"bad address", "listen: {spoa: nowhere}", "listen.spoa:"},
		{"beyond loopback", "listen: {spoa: '0.0.0.0:12345'}",
			"listen.spoa: 0.0.0.0:12345 is beyond loopback, and HAProxy's SPOP has no authentication (whoever reaches the port can spend counts); listen on loopback, or write spoa.insecure: true"},
		{"api.insecure is not spoa.insecure", "listen: {spoa: '0.0.0.0:12345', api: '127.0.0.1:8080'}\napi: {insecure: true}", "or write spoa.insecure: true"},
		{"beyond loopback, insecure", "listen: {spoa: '0.0.0.0:12345'}\nspoa: {insecure: true}", ""},
		{"unknown field", "spoa: {token: x}", "spoa.token: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if tt.want == "" {
				require.NoError(t, err)
				assert.NotNil(t, c)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
