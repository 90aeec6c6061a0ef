package crdt

import (
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInternBoundsEachSender: a node's incarnations and a PoP's replicas
// are capped, the newest refused; forgetting unused ones makes room again.
func TestInternBoundsEachSender(t *testing.T) {
	st := NewStore(StoreConfig{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1},
		MaxIncarnations: 2, MaxReplicasPerPoP: 3})
	intern := func(r identity.Replica) bool { _, ok := st.Intern(r); return ok }
	fra := func(node string, inc uint64) identity.Replica {
		return identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "fra"}, Node: node, Incarnation: inc}
	}
	tests := []struct {
		name string
		r    identity.Replica
		ok   bool
	}{
		{"first epoch", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 1), true},
		{"second epoch", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 2), true},
		{"third epoch: past the node's part", identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 3), false},
		{"a node of the PoP", fra("n", 1), true},
		{"another node: past the PoP's part", fra("m", 1), false},
		{"another PoP", identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1), true},
		{"a member: the own PoP holds self already", identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "b", Incarnation: 1}, true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.ok, intern(tt.r), tt.name)
	}
	assert.Equal(t, uint64(2), st.Stats().ReplicasRefused)
	require.Positive(t, st.ForgetReplicas(), "none holds a count")
	assert.True(t, intern(identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 3)), "room again after forgetting")
}
