package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// TestDeltaFloodStaysInTheMemoryBudget applies, through ApplyFrom, well-formed
// deltas from 512 PoP aggregates (64 PoPs, 8 epochs each), each counting
// the same 3 000 keys in two windows: three million remote entries, about
// 50 MB held as the store holds them. With a budget of 16 MiB the store's
// accounted bytes stay within its half of it, the keys are all held, and
// what is refused is counted as Full.
func TestDeltaFloodStaysInTheMemoryBudget(t *testing.T) {
	const budget = 16 << 20
	n, err := New(Config{Self: replica("a", 1), Rules: testRules(), MaxMemory: budget})
	require.NoError(t, err)
	w := t0 / int64(time.Minute)
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = "203.0.113." + strconv.Itoa(i)
	}
	var total ApplyStats
	for pop := range 64 {
		for epoch := range uint64(8) {
			d := &wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "p" + strconv.Itoa(pop)}, 1+epoch)}
			for _, k := range keys {
				d.Entries = append(d.Entries, crdt.Entry{Rule: "api", Key: k, Window: w - 1, Count: 1},
					crdt.Entry{Rule: "api", Key: k, Window: w, Count: 1})
			}
			var from crdt.InternCache
			total.Add(n.Link().ApplyFrom(t0, d, ScopeGlobal, &from))
		}
	}
	st := n.Stats().Store
	t.Logf("merged %d, refused %d; store accounts %.1f MiB (tables %.1f, remote entries %.1f)",
		total.Merged, total.Full, float64(st.Bytes())/(1<<20), float64(st.TableBytes)/(1<<20), float64(st.SideBytes)/(1<<20))
	assert.LessOrEqual(t, st.Bytes(), budget/2)
	assert.Equal(t, len(keys), st.Keys)
	assert.Positive(t, total.Full)
	assert.Equal(t, 64*8*2*len(keys), total.Merged+total.Full)
}
