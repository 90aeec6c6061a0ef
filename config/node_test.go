package config

import (
	"strings"
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
)

func TestNameOf(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"valid as is", "ams-1", "ams-1"},
		{"fully qualified host name", "ams-1.example.com", "ams-1-example-com"},
		{"separators and white space", "a/b#c d*e>f", "a-b-c-d-e-f"},
		{"unicode kept", "zürich", "zürich"},
		{"cut to the length bound", strings.Repeat("h", 70), strings.Repeat("h", identity.MaxNameLen)},
		{"nothing left", "", "edge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nameOf(tt.in, "edge")
			assert.Equal(t, tt.want, got)
			assert.NoError(t, identity.ValidName(got))
		})
	}
	assert.NoError(t, identity.ValidName(defaultNodeID()))
}

func TestNodeReplica(t *testing.T) {
	n := Node{ID: "ams-1", Region: "eu", PoP: "ams"}
	assert.Equal(t, identity.PoPID{Region: "eu", PoP: "ams"}, n.PoPID())
	assert.Equal(t, "eu/ams/ams-1#7", n.Replica(7).String())
}
