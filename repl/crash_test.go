package repl

import (
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
)

// With region voices a restarted node takes no PoP total of its own region
// from its state file; everything else it takes as without them.
func TestSettingsRestores(t *testing.T) {
	self := identity.PoPID{Region: "us", PoP: "ord"}
	for _, tc := range []struct {
		name   string
		r      identity.Replica
		voices bool
		want   bool
	}{
		{"own PoP total, voices off", identity.PoPReplica(self, 3), false, true},
		{"own PoP total", identity.PoPReplica(self, 3), true, false},
		{"PoP total of the own region", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "sjc"}, 4), true, false},
		{"PoP total of another region", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 4), true, true},
		{"another region's total", identity.RegionReplica("eu", 5), true, true},
		{"a member's count", identity.Replica{PoPID: self, Node: "ord-2", Incarnation: 7}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Settings{RegionVoices: tc.voices}.Restores(self, tc.r))
		})
	}
}
