package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anycastFleet is a fleet that starts at once under anycast traffic (each
// key on one PoP) of one global rule of a 10 s window, every key at 0.4 of
// its limit: the shape of below-half-anycast-one-node, smaller.
type anycastFleet struct {
	pops, regions, nodes int
	limit, keys          int
	seed                 uint64
	voices               bool
}

func (f anycastFleet) String() string {
	return fmt.Sprintf("%dx%d-in-%d/limit=%d/%d-keys/seed=%d/voices=%v",
		f.pops, f.nodes, f.regions, f.limit, f.keys, f.seed, f.voices)
}

// scenario returns f's scenario, dur long, with 120 ms and 1 % loss
// between regions.
func (f anycastFleet) scenario(t *testing.T, dur time.Duration) *Scenario {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: anycast-below-half\nseed: %d\nduration: %s\n", f.seed, dur)
	gridTopology(&b, f.regions, f.pops/f.regions, f.nodes, 1)
	fmt.Fprintf(&b, `network:
  intra_pop: {latency: 1ms, jitter: 200us}
  inter_pop: {latency: 15ms, jitter: 3ms}
  inter_region: {latency: 120ms, jitter: 20ms, loss: 0.01}
replication: {flush_interval: 50ms, peer_timeout: 1s, anti_entropy_interval: 5s, region_voices: %v}
rules:
  - {name: api, key: ip, limit: %d, window: 10s, scope: global, on_partition: share}
traffic:
  - {rule: api, keys: %d, anycast: true, rate: %d/s, pattern: poisson}
`, f.voices, f.limit, f.keys, f.keys*f.limit*4/100)
	sc, err := Parse([]byte(b.String()))
	require.NoError(t, err)
	return sc
}

// No request of an anycast key far below its limit is refused, with no
// fault, on fleets of other shapes than the project's own: one-node PoPs
// and PoPs of two and three nodes, 6 to 24 PoPs, limits of 30 to 200,
// other seeds, region voices on and off; the first 6 s, where every key's
// first replication lag falls (the fleet starts at once). A key's hot
// entry made after its first flushes took all its own admits for unseen
// (it now knows which are held: crdt's seedHot), and the spare
// room held five unseen admits in the key's first lag (at a cold start a
// key spent at one PoP now holds eight: localSpare). Before, these runs refused 0 to 570
// requests each (the one-node fleets and the two-node fleets of a limit of
// 200); the central limiter none.
//
// Not held: the two-node fleet of a limit of 200 with region voices and
// seed 7 still refuses 2 of 72 389 requests (checked at 4 at most): a
// node's ninth request within its key's first lag (a horizon of 250 ms),
// past both the room of eight and its equal part of the headroom (8.3
// requests).
func TestBelowHalfAnycastFleetsAcrossTheClass(t *testing.T) {
	accuracyTest(t)
	for _, tc := range []struct {
		anycastFleet
		most uint64 // requests below half refused, at most
	}{
		{anycastFleet{pops: 12, regions: 4, nodes: 1, limit: 50, keys: 6000, seed: 1, voices: false}, 0},
		{anycastFleet{pops: 12, regions: 4, nodes: 1, limit: 50, keys: 6000, seed: 2, voices: true}, 0},
		{anycastFleet{pops: 24, regions: 3, nodes: 1, limit: 100, keys: 4000, seed: 1, voices: false}, 0},
		{anycastFleet{pops: 24, regions: 3, nodes: 1, limit: 100, keys: 4000, seed: 2, voices: true}, 0},
		{anycastFleet{pops: 16, regions: 4, nodes: 1, limit: 60, keys: 6000, seed: 3, voices: true}, 0},
		{anycastFleet{pops: 8, regions: 2, nodes: 2, limit: 30, keys: 4000, seed: 4, voices: false}, 0},
		{anycastFleet{pops: 6, regions: 3, nodes: 3, limit: 40, keys: 4000, seed: 5, voices: true}, 0},
		{anycastFleet{pops: 12, regions: 4, nodes: 2, limit: 200, keys: 1500, seed: 6, voices: false}, 0},
		{anycastFleet{pops: 12, regions: 4, nodes: 2, limit: 200, keys: 1500, seed: 7, voices: true}, 4},
	} {
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			res, err := Run(tc.scenario(t, 6*time.Second), Options{})
			require.NoError(t, err)
			r := res.Report
			t.Logf("%d requests, %d below half refused (central %d), max a/l %.3f", r.Requests, r.RejectedBelowHalf, r.Central.RejectedBelowHalf, r.MaxAdmittedRatio)
			require.Positive(t, r.Requests)
			assert.Zero(t, r.Central.RejectedBelowHalf)
			assert.LessOrEqual(t, r.RejectedBelowHalf, tc.most)
		})
	}
}
