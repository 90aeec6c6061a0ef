package pop

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// A node's region state under concurrent decisions, flushes, merges of
// another PoP of the region, region flushes and changes of voice and
// epoch (run with -race): nothing is lost for good, once the node speaks
// again its region totals are its counts plus the region's PoP totals.
func TestRegionVoiceConcurrent(t *testing.T) {
	n := sparseNode(t, time.Minute)
	now := int64(time.Hour)
	win := now / int64(time.Minute)
	fra := identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "fra"}, 3)
	const keys, rounds = 8, 300
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { // decisions and flushes
		defer wg.Done()
		for i := range rounds {
			_, err := n.Decide(now, "api", "k"+strconv.Itoa(i%keys), 1)
			assert.NoError(t, err)
			n.Link().Flush(now, nil)
		}
	}()
	go func() { // another PoP of the region
		defer wg.Done()
		for i := range rounds {
			n.Link().ApplyFrom(now, &wire.Delta{Sender: fra, SentAt: now, Epoch: 3,
				Entries: []crdt.Entry{{Rule: "api", Key: "k" + strconv.Itoa(i%keys), Window: win, Count: uint64(i/keys + 1)}}}, ScopeGlobal, nil)
		}
	}()
	go func() { // the Core: voice and epoch
		defer wg.Done()
		for i := range rounds {
			n.Link().SetRegionVoice(i%3 != 0, uint64(5+i%2))
		}
	}()
	go func() { // the Core: region flushes and anti-entropy
		defer wg.Done()
		for i := range rounds {
			n.Link().FlushRegion(now, nil)
			n.Link().RegionAntiEntropyPart(now, nil, i%2, 2, i%3 == 0)
		}
	}()
	wg.Wait()
	n.Link().SetRegionVoice(true, 9)
	n.Link().Flush(now, nil)
	got := map[string]uint64{}
	for _, e := range n.Link().RegionAntiEntropyPart(now, nil, 0, 1, false).Entries {
		got[e.Key] = e.Count
	}
	require.Len(t, got, keys)
	for k := range keys {
		own := uint64(rounds / keys)
		if k < rounds%keys {
			own++
		}
		assert.Equal(t, own+uint64((rounds-1-k)/keys+1), got["k"+strconv.Itoa(k)], "k%d", k)
	}
}
