package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// floodYAML: a cheap rule, whose keys a flood can push near their limit
// for two requests each, and the demo rule.
const floodYAML = `
rules:
  - {name: cheap, limit: 10, window: 1m}
  - {name: demo, limit: 10, window: 10s}
limits: {max_keys: 20000}
`

// flood sends perKey requests for each of keys new keys of rule, in
// batches of /v1/checks, and returns how many were admitted.
func (ta *testApp) flood(rule, prefix string, keys, perKey int) int {
	ta.T.Helper()
	admitted := 0
	var sb strings.Builder
	for k := 0; k < keys; {
		sb.Reset()
		sb.WriteString(`{"checks":[`)
		for n := 0; n < 1000/perKey && k < keys; n, k = n+1, k+1 {
			for j := range perKey {
				if n > 0 || j > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `{"rule":%q,"key":"%s%d"}`, rule, prefix, k)
			}
		}
		sb.WriteString(`]}`)
		r := ta.Post("/v1/checks", sb.String())
		require.Equal(ta.T, http.StatusOK, r.Status, "%s", r.Body)
		var out struct {
			Results []struct {
				Allowed bool `json:"allowed"`
			} `json:"results"`
		}
		require.NoError(ta.T, json.Unmarshal(r.Body, &out))
		for _, res := range out.Results {
			if res.Allowed {
				admitted++
			}
		}
	}
	return admitted
}

// untilDenied sends up to max single /v1/check requests of key and returns
// how many were admitted before the first 429.
func (ta *testApp) untilDenied(rule, key string, max int) int {
	ta.T.Helper()
	for i := range max {
		r := ta.Post("/v1/check", fmt.Sprintf(`{"rule":%q,"key":%q}`, rule, key))
		if r.Status == http.StatusTooManyRequests {
			return i
		}
		require.Equal(ta.T, http.StatusOK, r.Status, "%s", r.Body)
	}
	return max
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestKeyFloodLeavesNewKeysLimited floods a node of max_keys 20000 over
// real HTTP with new keys of its cheapest rule: first two requests per key
// (far from the limit of 10), then six (more than half of it, so every
// key is being limited). After each, a fresh key of the demo rule (10 per
// 10 s) is admitted 10 times and then denied, a fresh key of the flooded
// rule at most 10 times, and the node holds at most max_keys keys.
func TestKeyFloodLeavesNewKeysLimited(t *testing.T) {
	heap0 := heapInUse()
	ta := startApp(t, floodYAML)
	node := ta.App.Node()
	for round, c := range []struct{ keys, perKey int }{{30_000, 2}, {25_000, 6}} {
		keys, perKey := c.keys, c.perKey
		ta.flood("cheap", fmt.Sprintf("a%d-", round), keys, perKey)
		st := node.Stats().Store
		assert.LessOrEqual(t, st.Keys, 20_000, "round %d", round)
		demo := ta.untilDenied("demo", fmt.Sprintf("fresh-%d", round), 20)
		assert.InDelta(t, 10, demo, 1, "round %d (%d keys, %d requests each): a fresh demo key", round, keys, perKey)
		cheap := ta.untilDenied("cheap", fmt.Sprintf("fresh-%d", round), 20)
		assert.LessOrEqual(t, cheap, 10, "round %d: a fresh key of the flooded rule", round)
		assert.LessOrEqual(t, node.Stats().Store.Keys, 20_000, "round %d", round)
		t.Logf("round %d: %d keys of %d requests: a fresh demo key admitted %d times, a fresh cheap key %d; %+v",
			round, keys, perKey, demo, cheap, node.Stats().Store)
		ta.Clk.Advance(2 * time.Minute) // the flood's windows pass; it starts again
	}
	grown := int64(heapInUse()) - int64(heap0)
	t.Logf("heap grew by %d KB", grown>>10)
	assert.Less(t, grown, int64(64<<20), "heap growth")
}

// TestKeyFloodDeniesNoFreshKeys: a flood of distinct new keys of one rule
// through the API (250 000 requests over 10 s of the App's clock, max_keys
// 20000, a limit of 10) of one request per key must not deny another
// client's fresh keys of that rule: at least 9 of 10 are admitted. On the
// same flood, and on floods of two and three requests per key, a key held
// at its limit stays denied, and a key that spent half its limit before
// the flood (and was evicted by it) is admitted at most 1.2 x the limit in
// the window. The fresh keys admitted after the floods of two and three
// requests per key are measured, not asserted: they are denied (see
// docs/security.md, "What is left").
func TestKeyFloodDeniesNoFreshKeys(t *testing.T) {
	// With the race detector, a quarter of the store and of the flood of
	// one request per key.
	maxKeys, requests, batches, rounds := 20_000, 250_000, 250, []int{1, 2, 3}
	if raceDetector {
		maxKeys, requests, batches, rounds = 5_000, 62_500, 125, []int{1}
	}
	ta := startApp(t, fmt.Sprintf(`
rules:
  - {name: api, limit: 10, window: 1m}
limits: {max_keys: %d}
`, maxKeys))
	for _, perKey := range rounds {
		ta.Clk.Advance(2 * time.Minute) // the last round's windows pass
		held, halfKey := fmt.Sprintf("held-%d", perKey), fmt.Sprintf("half-%d", perKey)
		require.Equal(t, 10, ta.untilDenied("api", held, 20), "the held key at its limit")
		half := ta.untilDenied("api", halfKey, 5)
		ev0 := ta.App.Node().Stats().Store.Evicted
		keys := requests / perKey
		for b := range batches {
			ta.flood("api", fmt.Sprintf("f%d-%d-", perKey, b), keys/batches, perKey)
			ta.Clk.Advance(10 * time.Second / time.Duration(batches))
		}
		st := ta.App.Node().Stats().Store
		fresh := 0
		for i := range 10 {
			if ta.Post("/v1/check", fmt.Sprintf(`{"rule":"api","key":"fresh-%d-%d"}`, perKey, i)).Status == http.StatusOK {
				fresh++
			}
		}
		more := ta.untilDenied("api", held, 20)
		half += ta.untilDenied("api", halfKey, 20)
		t.Logf("%d flood keys of %d requests in 10 s: fresh keys admitted %d of 10; the held key %d more; the half-spent key %d in the window (limit 10); evicted %d, keys %d",
			keys, perKey, fresh, more, half, st.Evicted-ev0, st.Keys)
		if perKey == 1 {
			assert.GreaterOrEqual(t, fresh, 9, "fresh keys of another client admitted")
		}
		assert.Zero(t, more, "%d requests per key: a key held at its limit stays denied", perKey)
		assert.LessOrEqual(t, float64(half), 1.2*10, "%d requests per key: the evicted key's count", perKey)
	}
}
