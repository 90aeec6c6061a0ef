package pop

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/window"
)

// TestCalendarEvictedKeyKeepsItsSpentQuota: a flood of new keys makes the
// memory budget evict keys of a monthly quota again and again through the
// month; no key comes back with a fresh quota before the month ends (an
// evicted key's counts stay in its rule's sketch, crdt's sketch.go, and it
// comes back with at least them): none is admitted more than its limit in
// the month, and none once the month's count has denied it. The cost is
// the other way: past the budget, a key new to the store starts from its
// sketch cells, which the flood raises, so it may be denied early. Once
// the month has ended (plus CalendarGrace, when Tick sweeps November's
// keys), every key has the whole quota again.
func TestCalendarEvictedKeyKeepsItsSpentQuota(t *testing.T) {
	seed := uint64(20261130)
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	const limit = 10
	month := window.Calendar{Period: window.Month}
	n, err := New(Config{Self: replica("a", 1), MaxKeys: 256, Shards: 4, Seed: 7,
		Rules: []Rule{calendarRule("monthly", month, limit)}})
	require.NoError(t, err)
	start := time.Date(2026, time.November, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	end := time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	victims := make([]string, 20)
	for i := range victims {
		victims[i] = "customer-" + strconv.Itoa(i)
	}
	admitted := map[string]int{}
	denied := map[string]bool{} // denied by the month's count
	const rounds = 30
	step := (end - start) / (rounds * 2_000)
	now := start
	flood := 0
	for round := range rounds {
		for _, v := range victims {
			for range 1 + rng.IntN(3) {
				now += step
				d, err := n.Decide(now, "monthly", v, 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted[v]++
					assert.False(t, denied[v], "round %d: %s admitted again after the month's count denied it", round, v)
				} else {
					denied[v] = true
					assert.Equal(t, time.Duration(end-now), d.RetryAfter, "round %d: %s waits for the month's end", round, v)
				}
			}
		}
		for range 1_900 { // a flood of new keys, each spending once
			now += step
			flood++
			_, err := n.Decide(now, "monthly", "flood-"+strconv.Itoa(flood), 1)
			require.NoError(t, err)
		}
	}
	require.Less(t, now, end)
	st := n.Stats().Store
	require.Greater(t, st.Evicted+st.Overflow, uint64(10_000), "the flood made the store evict: %+v", st)
	for _, v := range victims {
		assert.LessOrEqual(t, admitted[v], limit, "%s: never more than the month's quota, across evictions", v)
		assert.True(t, denied[v], "%s: denied before the month ended", v)
	}
	n.Tick(end + int64(CalendarGrace))
	for _, v := range victims {
		got := 0
		for range limit + 1 {
			d, err := n.Decide(end, "monthly", v, 1)
			require.NoError(t, err)
			if d.Allowed {
				got++
			}
		}
		assert.Equal(t, limit, got, "%s: the whole quota again in December", v)
	}
}
