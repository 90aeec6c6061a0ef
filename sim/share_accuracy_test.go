package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The figures of docs/replication.md ("Where share guesses"): each test runs
// one of the scenarios written for it (scenarios/*.yaml), shortened where
// the figure does not need the whole run. Same seed, same numbers.

// runScenario loads and runs a scenario, with its duration cut to dur when
// dur is not 0, and logs the headline figures.
func runScenario(t *testing.T, name string, dur time.Duration) Report {
	t.Helper()
	sc, err := Load("../scenarios/" + name + ".yaml")
	require.NoError(t, err)
	if dur != 0 {
		sc.Duration = dur
		for i := range sc.Traffic {
			sc.Traffic[i].End = min(sc.Traffic[i].End, dur)
		}
	}
	res, err := Run(sc, Options{})
	require.NoError(t, err)
	r := res.Report
	t.Logf("%s: admitted %d (central %d), max a/l %.3f (central %.3f), rejected below half %d (central %d)",
		name, r.Admitted, r.Central.Admitted, r.MaxAdmittedRatio, r.Central.MaxAdmittedRatio, r.RejectedBelowHalf, r.Central.RejectedBelowHalf)
	return r
}

// Keys below half their limit fleet-wide are never refused, however many
// nodes share them: 2 000 keys at 0.3 of their limit over 4 and 16 PoPs
// (8 and 32 nodes; scripts/share-table.sh runs 64 too). Before the spare
// room and the armed hot entries, 112 and 78 requests of such keys were
// refused in the 30 s runs (0.3 % and 0.2 %).
func TestBelowHalfNeverRejected(t *testing.T) {
	accuracyTest(t)
	for _, name := range []string{"below-half-4pops", "below-half-16pops"} {
		r := runScenario(t, name, 12*time.Second)
		assert.Zero(t, r.Central.RejectedBelowHalf, name)
		assert.Zero(t, r.RejectedBelowHalf, name)
		assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.0, name)
	}
}

// inPhases sums the admits of the phases called name, for the fleet and
// for the central node, and returns their highest max a/l.
func inPhases(r Report, name string) (fleet, central uint64, maxRatio float64) {
	for i, p := range r.Phases {
		if p.Name == name {
			fleet += p.Admitted
			central += r.Central.Phases[i].Admitted
			maxRatio = max(maxRatio, p.MaxAdmittedRatio)
		}
	}
	return fleet, central, maxRatio
}

// A whole-site failover during a cut: 300 keys at twice their limit, all
// of eu's clients move to us twenty seconds into the cut. us's total over
// all keys jumps more than threefold, so each key's share grows with it,
// although no key alone has requests enough to measure its growth. Before,
// us kept each key's 30 %: 0.55 of central in the cut.
func TestSiteFailoverGrowsShares(t *testing.T) {
	accuracyTest(t)
	r := runScenario(t, "site-failover-cut", 80*time.Second)
	fleet, central, peak := inPhases(r, "partitioned")
	t.Logf("in the cut: %d of central's %d (%.3f), max a/l %.3f", fleet, central, float64(fleet)/float64(central), peak)
	assert.GreaterOrEqual(t, float64(fleet), 0.80*float64(central))
	assert.LessOrEqual(t, peak, 1.10)
}

// One key surging on both sides of a cut (20x, then 60x its limit) while
// 300 others stay put: each side's total barely moves, so neither grows
// its share of that key. Before, both took the whole limit: 2.01.
func TestTwoSidedSurgeKeepsShares(t *testing.T) {
	accuracyTest(t)
	r := runScenario(t, "two-sided-surge", 80*time.Second)
	fleet, central, peak := inPhases(r, "partitioned")
	t.Logf("in the cut: %d of central's %d, max a/l %.3f", fleet, central, peak)
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.10)
	assert.GreaterOrEqual(t, float64(fleet), 0.95*float64(central))
}

// A side below its part of the limit surging alone in a cut (us, a sixth
// of the demand and half of the admits, rises 3.2 times; eu stays): read
// from the admits, us took its growth for a failover and the whole limit
// beside eu's half, 1.64 times the limit. Counted with what eu was asked, us
// carries about half of the fleet's demand after its surge: no failover,
// within 1.10 at three seeds, with and without region voices.
func TestSmallSideSurgeKeepsShares(t *testing.T) {
	accuracyTest(t)
	for seed := uint64(0); seed <= 2; seed++ {
		for _, voices := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/voices=%v", seed, voices), func(t *testing.T) {
				t.Parallel()
				r := runVariant(t, "small-side-surge", "share", voices, seed, 0, nil)
				t.Logf("max a/l %.3f", r.MaxAdmittedRatio)
				assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.10)
			})
		}
	}
}

// One key at 1.1 times its limit over 20 PoPs of two nodes, no fault: the
// near-limit split refused a node's second request within a lag while its
// share of the headroom was a request and a half (0.951 of central); a
// node that refused nothing lately may now hold a second in flight.
func TestMildOverloadNearCentral(t *testing.T) {
	accuracyTest(t)
	r := runScenario(t, "hot-key-20pops", 0)
	assert.GreaterOrEqual(t, float64(r.Admitted), 0.97*float64(r.Central.Admitted))
	assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.05)
}

// Crash loops and a cut of one-hour windows, with and without region
// voices: a PoP that came back under a new epoch is taken for down when
// silent again, so the fleet admits at least 0.80 of the central node in
// the fault phases (0.43-0.78 before with every PoP speaking), within
// 1.10 of the limit; a key with no count in the hour before a cut is
// split by its counts of the cut's hour (0.013-0.31 of central before
// with region voices). A region restarted with state files merges no PoP
// total of its own region from them (repl.Settings.Restorer): with region
// voices it counted them twice before (0.745 of central, 1.147). A PoP
// alone in its region tells its restart through its region's heartbeats
// (0.535 of central before with region voices, crash-loop-lone-pop). A
// PoP's first crash, its clients moved to the others at once, is told by
// its region's other PoPs no longer listing it (crash-failover, every PoP
// speaking: 0.675 before).
func TestCrashLoopsAndLongWindows(t *testing.T) {
	accuracyTest(t)
	for _, tc := range []struct {
		name      string
		minFault  float64
		maxRatio  float64
		offVoices bool // only without region voices
	}{
		{"crash-loop-one-node-pop", 0.80, 1.10, false},
		{"crash-loop-whole-pop", 0.80, 1.10, false},
		{"crash-loop-lone-pop", 0.80, 1.10, false},
		{"crash-failover", 0.80, 1.10, false},
		{"crash-loop-with-state", 0.80, 1.10, false},
		{"stop-loop-whole-pop", 0.80, 1.10, false},
		{"stop-loop-one-node-pops", 0.80, 1.10, false},
		{"hour-windows-cut", 0.85, 1.10, false},
		{"hour-windows-two-regions", 0.85, 1.10, false},
	} {
		for _, voices := range []bool{false, true} {
			if voices && tc.offVoices {
				continue
			}
			t.Run(fmt.Sprintf("%s/voices=%v", tc.name, voices), func(t *testing.T) {
				t.Parallel()
				sc, err := Load("../scenarios/" + tc.name + ".yaml")
				require.NoError(t, err)
				sc.Replication.RegionVoices = new(voices)
				res, err := Run(sc, Options{})
				require.NoError(t, err)
				fleet, central, _ := inPhases(res.Report, "partitioned")
				t.Logf("fault phases: %d of central's %d (%.3f), max a/l %.3f", fleet, central, float64(fleet)/float64(central), res.Report.MaxAdmittedRatio)
				assert.GreaterOrEqual(t, float64(fleet), tc.minFault*float64(central))
				assert.LessOrEqual(t, res.Report.MaxAdmittedRatio, tc.maxRatio)
			})
		}
	}
}

// Failovers as a class: a whole site onto one PoP or spread over many, one
// region of three withdrawn during its cut with its traffic moving to the
// other two or to one PoP of them, each with every PoP speaking and with
// region voices, at the scenarios' seeds and two others. The side the
// traffic moves to grows its share within a fraction of a window of the
// failover (share_demand.go, probe): at least 0.80 of what the central node
// admits in the cut (before the probe, failover-to-one-pop took 0.76 and
// 0.73, failover-region-of-three 0.87). The peak stays within 1.20 of the
// limit, far below keep's (1.85 in failover-to-one-pop).
//
// failover-to-one-pop with region voices took 0.786: a PoP of the other
// region heard late at startup made a partial cut that healed at once, and
// the keys, without history then, kept no base from it into the real cut,
// which split them by PoP count; a key without history in a healed
// partition now takes the counts of the window before the new cut (0.914).
//
// failover-in-cut-window moves its traffic inside the window the cut began
// in: measured against that window's whole demand, half of it after the
// failover, the side's demand grew 1.5 times and its share never did
// (0.39-0.40 of central); the window's early part is now the baseline when
// the rest of it ran 1.5 times above it, and a key that marked its own
// early part is probed in the rest of that window (share_demand.go,
// markBase): 0.85-0.89. Its 30 s twin, whose keys are too thin for a node
// to mark in the part of the window left, still misses (0.45-0.63, was
// 0.43-0.58): it grows only from the cut's first whole window, and opens
// over the next.
//
// failover-lone-region moves its traffic in the cut's first whole window:
// measured against that window, which held half of it, the failover never
// showed (0.73 of central); against the demand counted from the cut in
// the window it began in, it does, and the side grows over the ramp that
// lets the other side's last admits decay: 0.798-0.816 over these runs
// until its cut, in the fleet's first window, also took the side's part of
// the fleet's counts from that window (pop's snapshot): with none, the
// nodes of ams, where the clients went, read their growth as more than
// the fleet could carry and no takeover followed. Now 0.893-0.904. (That
// part must hold 400 requests over the rule's keys: the thin part of a
// 1 s window, scaled to a whole one, erred low enough for probes to take
// steady traffic for a failover, skewed-two-pops-1s 1.12 -> 1.45 in the
// cut.)
//
// failover-to-one-pop-of-three moves a quarter of the demand onto one PoP
// of three, which then carries 0.75 of the limit: that PoP's growth read
// past the fleet's demand and the others' read none, and every node kept
// its part (0.73-0.75 of central); the side's growth read from what its
// replicas were asked now stands for theirs (pop's bySide): 0.86-0.90.
func TestFailoversAcrossTheClass(t *testing.T) {
	accuracyTest(t)
	for _, tc := range []struct {
		name string
		min  float64
	}{
		{"failover-to-one-pop", 0.80}, {"failover-region-of-three", 0.80}, {"failover-region-to-one-pop-2", 0.80},
		{"failover-lone-region", 0.85},
		{"failover-in-cut-window", 0.80}, {"failover-uneven-demand", 0.85},
		{"failover-to-one-pop-of-three", 0.80},
	} {
		name := tc.name
		for seed := uint64(0); seed <= 2; seed++ {
			for _, voices := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/seed=%d/voices=%v", name, seed, voices), func(t *testing.T) {
					t.Parallel()
					sc, err := Load("../scenarios/" + name + ".yaml")
					require.NoError(t, err)
					sc.Replication.RegionVoices = new(voices)
					sc.Duration = 70 * time.Second // the heal: the figure is of the cut
					opts := Options{}
					if seed != 0 {
						opts.Seed = &seed
					}
					res, err := Run(sc, opts)
					require.NoError(t, err)
					fleet, central, _ := inPhases(res.Report, "partitioned")
					t.Logf("in the cut %d of central's %d (%.3f), max a/l %.3f",
						fleet, central, float64(fleet)/float64(central), res.Report.MaxAdmittedRatio)
					assert.GreaterOrEqual(t, float64(fleet), tc.min*float64(central))
					assert.LessOrEqual(t, res.Report.MaxAdmittedRatio, 1.20)
				})
			}
		}
	}
}

// A PoP stopped cleanly says goodbye (repl.Core.Goodbye): the others take
// it for down from its first stop, not for cut off, so share holds back
// nothing for it and admits over the fault phases what keep admits (within
// 3 %), at other seeds and with and without region voices. Crashed instead
// (crash-loop-whole-pop), its first silence is taken for a cut: share
// admitted 44 there where keep admitted 100. Each phase (a second, about
// 100 admits) is held to 0.90 of keep's: share's nodes also replicate
// what they were asked (pop's asked windows) and keep's do not, so their
// messages differ, the simulated network's draws with them, and the two
// runs part by a few requests a phase (0.94-1.04 of keep's; the sum
// within 1.5 %).
func TestStoppedPoPIsDownNotCut(t *testing.T) {
	accuracyTest(t)
	for _, name := range []string{"stop-loop-whole-pop", "stop-loop-one-node-pops"} {
		for seed := uint64(0); seed <= 2; seed++ {
			for _, voices := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/seed=%d/voices=%v", name, seed, voices), func(t *testing.T) {
					t.Parallel()
					var runs [2]Report
					for i, policy := range []string{"keep", "share"} {
						sc, err := Load("../scenarios/" + name + ".yaml")
						require.NoError(t, err)
						sc.Replication.RegionVoices = new(voices)
						opts := Options{Policy: policy, NoCentral: true}
						if seed != 0 {
							opts.Seed = &seed
						}
						res, err := Run(sc, opts)
						require.NoError(t, err)
						runs[i] = res.Report
					}
					var share, keep uint64
					for i, p := range runs[1].Phases {
						if p.Name != "partitioned" {
							continue
						}
						k := runs[0].Phases[i]
						share, keep = share+p.Admitted, keep+k.Admitted
						assert.GreaterOrEqual(t, float64(p.Admitted), 0.90*float64(k.Admitted), "phase %d-%d ms: share %d, keep %d", p.FromMS, p.ToMS, p.Admitted, k.Admitted)
					}
					assert.GreaterOrEqual(t, float64(share), 0.97*float64(keep), "the fault phases: share %d, keep %d", share, keep)
				})
			}
		}
	}
}

// A PoP whose nodes all restarted counts what it admitted before from the
// other PoPs, which relay its former epochs' totals (repl's relay). With
// one other PoP and 1 % of the messages between the regions lost, one lost
// relay left the restarted PoP blind to its own former admits for the
// rest of the window: stop-loop-lossy went to 1.25 of its limit without
// region voices (1.04 at other seeds, or without loss). The relay of a
// PoP's own former epochs now goes twice.
func TestRestartedPoPCountsItsFormerAdmitsOverALossyLink(t *testing.T) {
	accuracyTest(t)
	for seed := uint64(0); seed <= 2; seed++ {
		for _, voices := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/voices=%v", seed, voices), func(t *testing.T) {
				t.Parallel()
				r := runVariant(t, "stop-loop-lossy", "share", voices, seed, 0, nil)
				t.Logf("max a/l %.3f", r.MaxAdmittedRatio)
				assert.LessOrEqual(t, r.MaxAdmittedRatio, 1.10)
			})
		}
	}
}
