package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Accuracy across classes of scenarios rather than on one file each: the
// scenarios of scenarios/ with other seeds, sizes and region voices on and
// off (scripts/share-table.sh runs them whole).

// runVariant runs scenario name under policy with region voices as told,
// the seed given (0: the scenario's), its duration cut to dur (0: whole)
// and change applied to it first.
func runVariant(t *testing.T, name, policy string, voices bool, seed uint64, dur time.Duration, change func(*Scenario)) Report {
	t.Helper()
	sc, err := Load("../scenarios/" + name + ".yaml")
	require.NoError(t, err)
	sc.Replication.RegionVoices = new(voices)
	if dur != 0 {
		sc.Duration = dur
		for i := range sc.Traffic {
			sc.Traffic[i].End = min(sc.Traffic[i].End, dur)
		}
	}
	if change != nil {
		change(sc)
	}
	opts := Options{Policy: policy}
	if seed != 0 {
		opts.Seed = &seed
	}
	res, err := Run(sc, opts)
	require.NoError(t, err)
	return res.Report
}

// Keys far below their limit are never refused, whatever the number of
// keys and PoPs: anycast keys (each on one PoP) of a global rule at 0.4 of
// their limit, over six PoPs of two nodes and twelve one-node PoPs, other
// seeds, both region voices settings, no fault. Over many keys a node's
// fourth or fifth request within one replication lag of a key's first
// happens, when the near-limit split gives each replica an equal part of
// the headroom (the key's counts are not held anywhere yet): before the
// spare room of a key within half its limit held five unseen admits, these
// runs refused a few requests each (below-half-anycast: 83 and 136 of 2
// million requests).
//
// Not held: twelve one-node PoPs at 2 requests/s per key still refuse a
// few (15 of 64 000 here, 21 with region voices; 46 and 76 before the hot
// entries were armed earlier): a key whose own counts all went out within one horizon
// of the split gets its hot entry then, blind to which of them were held
// before (crdt's armHot); the bound checked is 1 in 2 000.
func TestBelowHalfAnycastAcrossTheClass(t *testing.T) {
	accuracyTest(t)
	for _, tc := range []struct {
		name    string
		seed    uint64
		keys    int
		refused float64 // of the requests, at most
	}{
		{"below-half-anycast", 3, 8000, 0},
		{"below-half-anycast-one-node", 5, 4000, 0.0005},
	} {
		for _, voices := range []bool{false, true} {
			if voices && tc.refused > 0 {
				continue // the run takes long: scripts/share-table.sh runs it whole
			}
			t.Run(fmt.Sprintf("%s/seed=%d/voices=%v", tc.name, tc.seed, voices), func(t *testing.T) {
				t.Parallel()
				r := runVariant(t, tc.name, "", voices, tc.seed, 8*time.Second, func(sc *Scenario) {
					scale := float64(tc.keys) / float64(sc.Traffic[0].Keys)
					sc.Traffic[0].Keys = tc.keys
					sc.Traffic[0].Rate *= Rate(scale)
				})
				t.Logf("%d requests, %d refused (central %d), %d below half (central %d)", r.Requests, r.Rejected, r.Central.Rejected, r.RejectedBelowHalf, r.Central.RejectedBelowHalf)
				require.Positive(t, r.Requests)
				assert.Zero(t, r.Central.RejectedBelowHalf)
				assert.LessOrEqual(t, float64(r.RejectedBelowHalf), tc.refused*float64(r.Requests))
			})
		}
	}
}

// A hot key at 1.1 times its limit, no fault, on fleets of other shapes
// than hot-key-20pops: one to three nodes per PoP, 12 PoPs of three nodes
// (scripts/share-table.sh runs 20 PoPs of one node and 80 nodes too). Without region voices the fleet admits at least
// 0.97 of the central node; with them a PoP that is not its region's voice
// reaches the other regions a hop and a flush slot later, so it holds back
// more (0.96-0.98 of central; hot-key-20pops itself 0.960), checked here
// at 0.95. The peak stays within 1.05 of the limit either way.
func TestMildOverloadAcrossTheClass(t *testing.T) {
	accuracyTest(t)
	for _, name := range []string{"hot-key-20pops-mixed", "hot-key-12pops-three-nodes"} {
		for _, voices := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/voices=%v", name, voices), func(t *testing.T) {
				t.Parallel()
				r := runVariant(t, name, "", voices, 0, 0, nil)
				t.Logf("admitted %d of central's %d (%.3f), max a/l %.3f", r.Admitted, r.Central.Admitted, float64(r.Admitted)/float64(r.Central.Admitted), r.MaxAdmittedRatio)
				least := 0.97
				if voices {
					least = 0.95
				}
				assert.GreaterOrEqual(t, float64(r.Admitted), least*float64(r.Central.Admitted))
				assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.05)
			})
		}
	}
}

// 1 s windows with clocks 1 s (or 1.5 s) apart across regions, of other
// shapes: two PoPs of two nodes, four PoPs of one to three nodes, a skew
// of more than a window. share never goes further over the limit than
// keep, and skewed-two-pops-1s no longer starts at 1.40 of the limit: the
// PoP a window ahead stepped back a whole window to the fleet clock while
// it counted on in the window ahead, where the others did not look for
// its counts (crdt's steppedBack). What remains over 1.20 is the first
// seconds of a start with clocks apart (the fleet clock settles within a
// few heartbeats) and the heal of a cut (as without skew: 1.18 in
// skewed-two-pops-1s with its clocks agreeing).
func TestSkewedOneSecondWindowsAcrossTheClass(t *testing.T) {
	accuracyTest(t)
	for _, name := range []string{"skewed-two-pops-1s", "skewed-four-pops-1s", "skewed-two-pops-1500ms-1s"} {
		for _, voices := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/voices=%v", name, voices), func(t *testing.T) {
				t.Parallel()
				share := runVariant(t, name, "share", voices, 0, 0, nil)
				keep := runVariant(t, name, "keep", voices, 0, 0, nil)
				_, _, healthy := inPhases(share, "healthy")
				_, _, cut := inPhases(share, "partitioned")
				t.Logf("max a/l %.3f (keep %.3f), before the cut %.3f, in it %.3f", share.MaxAdmittedRatio, keep.MaxAdmittedRatio, healthy, cut)
				assert.LessOrEqual(t, share.MaxAdmittedRatio, max(keep.MaxAdmittedRatio, 1.10))
				assert.LessOrEqual(t, share.MaxAdmittedRatio, 1.30)
				assert.LessOrEqual(t, cut, 1.20)
				if name == "skewed-two-pops-1s" {
					assert.LessOrEqual(t, healthy, 1.25)
				}
			})
		}
	}
}
