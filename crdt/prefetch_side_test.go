package crdt

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefetchSideChangesNothing calls PrefetchSide for keys absent, keys
// with short and long lists of remote counts, and replicas known or not,
// while another goroutine merges into the same shards (the race detector
// checks the locking): the store holds what the merges alone give.
func TestPrefetchSideChangesNothing(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 2, Seed: 5})
	var reps []ReplicaID
	for i := range 40 {
		id, ok := st.Intern(rep(fmt.Sprintf("r%d", i), 1))
		require.True(t, ok)
		reps = append(reps, id)
	}
	const cur = int64(100)
	for _, r := range reps {
		st.Merge(0, "long", cur, cur, r, 50)
	}
	for _, r := range reps[:3] {
		st.Merge(0, "short", cur, cur, r, 50)
	}
	keys := []string{"long", "short", "absent"}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // merges into the same shards meanwhile
		defer wg.Done()
		for round := range 50 {
			for i, r := range reps {
				st.Merge(0, fmt.Sprintf("other%d", i%8), cur, cur, r, uint64(round+1))
			}
		}
	}()
	for range 50 {
		for _, k := range keys {
			for _, r := range append(reps, ReplicaID(len(reps)+5)) {
				st.PrefetchSide(st.KeyHash(0, k), 0, k, r)
			}
		}
	}
	wg.Wait()
	// Every count is exactly 50: not above 50, and below 51.
	for _, r := range reps {
		assert.Equal(t, Unchanged, st.Merge(0, "long", cur, cur, r, 50), "long list, replica %d", r)
		assert.Equal(t, Merged, st.Merge(0, "long", cur, cur, r, 51), "long list, replica %d", r)
	}
	for _, r := range reps[:3] {
		assert.Equal(t, Unchanged, st.Merge(0, "short", cur, cur, r, 50))
		assert.Equal(t, Merged, st.Merge(0, "short", cur, cur, r, 51))
	}
	assert.Equal(t, Merged, st.Merge(0, "short", cur, cur, reps[3], 1), "a replica the short list does not hold")
	assert.Equal(t, 10, st.Stats().Keys, "absent stays absent")
}

// TestSideGuessInRange: the guess is a position of the list for every
// replica ID up to the number known, and beyond (an ID interned after the
// caller read the count).
func TestSideGuessInRange(t *testing.T) {
	for _, n := range []int{1, 16, 17, 300, 1024} {
		for _, nreps := range []int{1, 16, 300, 65536} {
			for _, r := range []ReplicaID{0, 1, ReplicaID(nreps - 1), ReplicaID(nreps), ReplicaID(nreps * 2)} {
				g := sideGuess(n, r, nreps)
				assert.True(t, g >= 0 && g < n, "n %d nreps %d rep %d: %d", n, nreps, r, g)
			}
		}
	}
}
