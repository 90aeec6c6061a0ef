package identity

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPoPReplica(t *testing.T) {
	agg := PoPReplica(PoPID{Region: "eu", PoP: "ams"}, 7)
	assert.Equal(t, Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: PoPNode, Incarnation: 7}, agg)
	assert.Equal(t, "eu/ams/*#7", agg.String())
	assert.NoError(t, agg.Validate(), "an aggregate is a valid sender")
	tests := []struct {
		name           string
		r              Replica
		isPoP, samePoP bool
	}{
		{"aggregate", agg, true, true},
		{"aggregate of another epoch", PoPReplica(PoPID{Region: "eu", PoP: "ams"}, 8), true, true},
		{"node of the PoP", Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 7}, false, true},
		{"aggregate of another PoP", PoPReplica(PoPID{Region: "us", PoP: "iad"}, 7), true, false},
		{"node called like a pattern", Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "**", Incarnation: 7}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.isPoP, tt.r.IsPoP())
			assert.Equal(t, tt.samePoP, tt.r.SamePoP(agg))
		})
	}
}
