package crdt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestInternBoundsEachSender: a node's incarnations and a PoP's replicas
// are capped, the newest refused; forgetting unused ones makes room again.
func TestInternBoundsEachSender(t *testing.T) {
	st := NewStore(StoreConfig{Self: Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1},
		MaxIncarnations: 2, MaxReplicasPerPoP: 3})
	intern := func(r Replica) bool { _, ok := st.Intern(r); return ok }
	fra := func(node string, inc uint64) Replica {
		return Replica{PoPID: PoPID{Region: "eu", PoP: "fra"}, Node: node, Incarnation: inc}
	}
	tests := []struct {
		name string
		r    Replica
		ok   bool
	}{
		{"first epoch", PoPReplica(PoPID{Region: "eu", PoP: "fra"}, 1), true},
		{"second epoch", PoPReplica(PoPID{Region: "eu", PoP: "fra"}, 2), true},
		{"third epoch: past the node's part", PoPReplica(PoPID{Region: "eu", PoP: "fra"}, 3), false},
		{"a node of the PoP", fra("n", 1), true},
		{"another node: past the PoP's part", fra("m", 1), false},
		{"another PoP", PoPReplica(PoPID{Region: "us", PoP: "iad"}, 1), true},
		{"a member: the own PoP holds self already", Replica{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "b", Incarnation: 1}, true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.ok, intern(tt.r), tt.name)
	}
	assert.Equal(t, uint64(2), st.Stats().ReplicasRefused)
	require.Positive(t, st.ForgetReplicas(), "none holds a count")
	assert.True(t, intern(PoPReplica(PoPID{Region: "eu", PoP: "fra"}, 3)), "room again after forgetting")
}
