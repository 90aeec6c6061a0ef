package pop

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A periodic anti-entropy round re-sends a key's counts in the two rounds
// after the one that found it changed, to its PoP and, with an epoch, to
// the other PoPs; with or without an epoch (a node whose PoP has none yet
// still repairs its members).
func TestAntiEntropyResendsWhatSettled(t *testing.T) {
	for _, epoch := range []uint64{0, 7} {
		n := newNode(t, replica("a", 1))
		if epoch != 0 {
			n.Link().SetEpoch(epoch)
		}
		now := t0
		d, err := n.Decide(now, "api", "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		var local, global []int
		for range 4 {
			b := n.Link().AntiEntropyPart(now, nil, 0, 1, true)
			local, global = append(local, len(b.Local.Entries)), append(global, len(b.PoP.Entries))
		}
		assert.Equal(t, []int{0, 1, 1, 0}, local, "epoch %d: own counts to the PoP", epoch)
		if epoch != 0 {
			assert.Equal(t, []int{0, 1, 1, 0}, global, "the PoP total to the others")
		} else {
			assert.Equal(t, []int{0, 0, 0, 0}, global, "no epoch: no PoP total")
		}
		full := n.Link().AntiEntropyPart(now, nil, 0, 1, false)
		assert.Len(t, full.Local.Entries, 1, "a full round sends every count")
	}
}
