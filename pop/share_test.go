package pop

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

func shareNodes(t *testing.T, policy Policy) (eu, us *Node) {
	t.Helper()
	return pairNodes(t, Rule{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: policy})
}

// pairNodes returns a node of eu/ams and one of us/iad, both of epoch 1,
// with rule r.
func pairNodes(t testing.TB, r Rule) (eu, us *Node) {
	t.Helper()
	rules := []Rule{r}
	var err error
	eu, err = New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}, Rules: rules})
	require.NoError(t, err)
	us, err = New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "b", Incarnation: 1}, Rules: rules})
	require.NoError(t, err)
	eu.Link().SetEpoch(1)
	us.Link().SetEpoch(1)
	return eu, us
}

func sync2(t *testing.T, now int64, a, b *Node) {
	t.Helper()
	out := a.Link().Flush(now, nil)
	b.Link().Apply(now, &out.PoP, ScopeGlobal)
	out = b.Link().Flush(now, nil)
	a.Link().Apply(now, &out.PoP, ScopeGlobal)
}

// healthyWindow drives one window from start on key "k", both sides in
// sync: eu decides euRate requests and us usRate every hundredth of it.
func healthyWindow(t *testing.T, eu, us *Node, start, w int64, euRate, usRate int) {
	t.Helper()
	for i := int64(0); i < 100; i++ {
		now := start + i*w/100
		for range euRate {
			_, _ = eu.Decide(now, "api", "k", 1)
		}
		for range usRate {
			_, _ = us.Decide(now, "api", "k", 1)
		}
		sync2(t, now, eu, us)
	}
}

// runCut drives steady demand of rate per side per 100ms for several
// windows of a cut and returns what each side admitted in the last full window.
func runCut(t *testing.T, policy Policy) (euAdm, usAdm int) {
	t.Helper()
	eu, us := shareNodes(t, policy)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W // a window boundary
	// One healthy window: eu carries 3x the traffic of us, both synced.
	healthyWindow(t, eu, us, start, W, 3, 1)
	cut := start + W
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	us.Link().SetUnheard(cut, []string{"eu/ams"})
	st := eu.Partition(cut)
	require.True(t, st.Partitioned)
	require.Equal(t, []string{"us/iad"}, st.Unheard)
	// Four windows of heavy demand on both sides, no messages.
	for i := int64(0); i < 400; i++ {
		now := cut + i*W/100
		inLast := now >= cut+3*W
		for j := 0; j < 10; j++ {
			if d, _ := eu.Decide(now, "api", "k", 1); d.Allowed && inLast {
				euAdm++
			}
			if d, _ := us.Decide(now, "api", "k", 1); d.Allowed && inLast {
				usAdm++
			}
		}
	}
	return euAdm, usAdm
}

func TestShareSplitsLimitByPreCutTraffic(t *testing.T) {
	euAdm, usAdm := runCut(t, Share)
	t.Logf("share: eu admitted %d, us %d in one window (limit 100)", euAdm, usAdm)
	assert.LessOrEqual(t, euAdm+usAdm, 102, "the sides together stay at the limit")
	assert.InDelta(t, 75, euAdm, 3)
	assert.InDelta(t, 25, usAdm, 3)

	euKeep, usKeep := runCut(t, Keep)
	t.Logf("keep: eu admitted %d, us %d", euKeep, usKeep)
	assert.Greater(t, euKeep+usKeep, 190, "keep lets each side spend the whole limit")
}

func TestShareFallsBackToPoPCountForNewKeys(t *testing.T) {
	eu, _ := shareNodes(t, Share)
	st := eu.Partition(t0)
	require.Len(t, st.Rules, 1)
	assert.False(t, st.Rules[0].EnforcingShare)
	assert.Equal(t, 1.0, st.Rules[0].MeanShare, "outside partitions a rule may spend its whole limit")
	// eu knows of iad only as unheard: 2 PoPs, one per side.
	eu.Link().SetUnheard(t0, []string{"us/iad"})
	admitted := 0
	for i := 0; i < 100; i++ {
		if d, _ := eu.Decide(t0, "api", "fresh", 1); d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 50, admitted)
	st = eu.Partition(t0)
	assert.InDelta(t, 0.5, st.SideShare, 1e-9)
	require.Len(t, st.Rules, 1)
	assert.True(t, st.Rules[0].EnforcingShare)
}

func TestShareHealsAfterHold(t *testing.T) {
	eu, _ := shareNodes(t, Share)
	eu.Link().SetUnheard(t0, []string{"us/iad"})
	for i := 0; i < 50; i++ {
		_, _ = eu.Decide(t0, "api", "k", 1)
	}
	d, _ := eu.Decide(t0, "api", "k", 1)
	require.False(t, d.Allowed, "half of the limit used up")
	eu.Link().SetUnheard(t0+1, nil)
	d, _ = eu.Decide(t0+2, "api", "k", 1)
	assert.False(t, d.Allowed, "shares hold while the other side's counts arrive")
	assert.True(t, eu.Partition(t0+2).Partitioned)
	after := t0 + 2 + int64(DefaultHealHold)
	d, _ = eu.Decide(after, "api", "k", 1)
	assert.True(t, d.Allowed, "back to the global view")
	assert.False(t, eu.Partition(after).Partitioned)
}

// TestShareHoldCountsWhatArrived: while shares are held after a heal, the
// other side's counts that have arrived raise the share's limit by as much
// as they raise the estimate, so each side goes on spending its share
// instead of nothing until the hold ends.
func TestShareHoldCountsWhatArrived(t *testing.T) {
	eu, us := shareNodes(t, Share)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	// One healthy window at the limit, even traffic.
	healthyWindow(t, eu, us, start, W, 1, 1)
	cut := start + W
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	us.Link().SetUnheard(cut, []string{"eu/ams"})
	// Two windows of the cut, each side at its half; then no traffic.
	for i := int64(0); i < 200; i++ {
		now := cut + i*W/100
		_, _ = eu.Decide(now, "api", "k", 1)
		_, _ = us.Decide(now, "api", "k", 1)
	}
	// Healed half a window on, every count exchanged: the window before
	// (50 per side) weighs half, so each side has room for 25 of its 50.
	heal := cut + 2*W + W/2
	eu.Link().SetUnheard(heal, nil)
	us.Link().SetUnheard(heal, nil)
	sync2(t, heal, eu, us)
	now := heal + int64(DefaultHealHold)/2
	admitted := 0
	for j := 0; j < 40; j++ {
		if d, _ := eu.Decide(now, "api", "k", 1); d.Allowed {
			admitted++
		}
	}
	assert.True(t, eu.Partition(now).Partitioned, "still held")
	assert.InDelta(t, 25, admitted, 1, "a side spends its share on top of the other side's counts")
}

// TestShareFollowsAFailover: all of eu's traffic moves to us during the
// cut (a dead PoP looks like a partitioned one). us's share grows to the
// whole limit; eu, which has no traffic left, spends nothing; the two never
// spend more than the limit in a window.
func TestShareFollowsAFailover(t *testing.T) {
	eu, us := shareNodes(t, Share)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	// One healthy window at the limit: eu carries 70 % of the traffic.
	healthyWindow(t, eu, us, start, W, 7, 3)
	cut := start + W
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	us.Link().SetUnheard(cut, []string{"eu/ams"})
	var euAdm, usAdm [6]int
	for w := int64(0); w < 6; w++ {
		for i := int64(0); i < 100; i++ {
			now := cut + w*W + i*W/100
			euN, usN := 7, 3
			if w >= 2 { // the failover
				euN, usN = 0, 10
			}
			for j := 0; j < euN; j++ {
				if d, _ := eu.Decide(now, "api", "k", 1); d.Allowed {
					euAdm[w]++
				}
			}
			for j := 0; j < usN; j++ {
				if d, _ := us.Decide(now, "api", "k", 1); d.Allowed {
					usAdm[w]++
				}
			}
		}
	}
	t.Logf("admitted per window: eu %v, us %v", euAdm, usAdm)
	for w := range euAdm {
		assert.LessOrEqual(t, euAdm[w]+usAdm[w], 101, "window %d: the sides together stay at the limit", w)
	}
	assert.InDelta(t, 30, usAdm[1], 2, "before the failover us spends its 30 %")
	assert.GreaterOrEqual(t, usAdm[4], 95, "after it us takes the whole limit")
	assert.InDelta(t, 1.0, us.Partition(cut + 6*W).Rules[0].MeanShare, 0.01)
}

// TestShareKeepsSharesOfASteadySide: sides whose demand does not move keep
// their shares.
func TestShareKeepsSharesOfASteadySide(t *testing.T) {
	euAdm, usAdm := runCut(t, Share)
	assert.InDelta(t, 75, euAdm, 3)
	assert.InDelta(t, 25, usAdm, 3)
}

// TestShareRollingCuts: three PoPs cut off in turn with no heal between.
// The shares of the second cut come from the window every side saw whole
// before the first, so the sides add up to the limit although ap never
// heard the others' counts of the first cut.
func TestShareRollingCuts(t *testing.T) {
	rules := []Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share}}
	mk := func(region, p string) *Node {
		n, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: region, PoP: p}, Node: "a", Incarnation: 1}, Rules: rules})
		require.NoError(t, err)
		n.Link().SetEpoch(1)
		return n
	}
	eu, us, ap := mk("eu", "ams"), mk("us", "iad"), mk("ap", "sin")
	all := []*Node{eu, us, ap}
	exchange := func(now int64, ns ...*Node) {
		for _, a := range ns {
			out := a.Link().Flush(now, nil)
			for _, b := range ns {
				if b != a {
					b.Link().Apply(now, &out.PoP, ScopeGlobal)
				}
			}
		}
	}
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	for i, n := range all { // 50, 30, 20 of the limit
		for j := 0; j < []int{50, 30, 20}[i]; j++ {
			_, _ = n.Decide(start, "api", "k", 1)
		}
	}
	exchange(start, all...)
	cut1 := start + W
	eu.Link().SetUnheard(cut1, []string{"ap/sin"})
	us.Link().SetUnheard(cut1, []string{"ap/sin"})
	ap.Link().SetUnheard(cut1, []string{"eu/ams", "us/iad"})
	for _, n := range all {
		for j := 0; j < 200; j++ {
			_, _ = n.Decide(cut1+W/2, "api", "k", 1)
		}
	}
	exchange(cut1+W/2, eu, us)
	// A window later us is cut off and ap hears eu again, before any count
	// of the first cut has reached it.
	cut2 := cut1 + W + W/2
	eu.Link().SetUnheard(cut2, []string{"us/iad"})
	us.Link().SetUnheard(cut2, []string{"ap/sin", "eu/ams"})
	ap.Link().SetUnheard(cut2, []string{"us/iad"})
	share := func(n *Node) float64 { return n.Partition(cut2).Rules[0].MeanShare }
	assert.InDelta(t, 0.7, share(eu), 1e-9)
	assert.InDelta(t, 0.7, share(ap), 1e-9, "derived from the window seen whole before the first cut")
	assert.InDelta(t, 0.3, share(us), 1e-9)
}

func TestSharesSurviveARuleReload(t *testing.T) {
	eu, _ := shareNodes(t, Share)
	eu.Link().SetUnheard(t0, []string{"us/iad"})
	rules := eu.Rules()
	rules = append(rules, Rule{Name: "other", Limit: 10, Window: time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share})
	require.NoError(t, eu.SetRules(rules))
	st := eu.Partition(t0)
	assert.True(t, st.Partitioned)
	admitted := 0
	for i := 0; i < 10; i++ {
		if d, _ := eu.Decide(t0, "other", "k", 1); d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 5, admitted, "a rule added during the cut enforces its share too")
}

// TestShareCountsMembersAndAggregates: a side's share sums its PoP's members,
// and another PoP's aggregate counts for that PoP, which is one PoP however
// many replicas it has.
func TestShareCountsMembersAndAggregates(t *testing.T) {
	rules := []Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share}}
	eu, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}, Rules: rules})
	require.NoError(t, err)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	for i := 0; i < 30; i++ {
		_, _ = eu.Decide(start, "api", "k", 1)
	}
	for _, d := range []struct {
		sender identity.Replica
		via    Scope
		count  uint64
	}{
		{identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a2", Incarnation: 1}, ScopePoP, 20},
		{identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a2", Incarnation: 2}, ScopePoP, 10},
		{identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1), ScopeGlobal, 30},
		{identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 2), ScopeGlobal, 10},
	} {
		st := eu.Link().Apply(start, &wire.Delta{Sender: d.sender, Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: start / W, Count: d.count}}}, d.via)
		require.Equal(t, 1, st.Merged, d.sender)
	}
	cut := start + W
	eu.Link().SetUnheard(cut, []string{"us/iad"})
	st := eu.Partition(cut)
	assert.InDelta(t, 0.5, st.SideShare, 1e-9, "two PoPs")
	require.Len(t, st.Rules, 1)
	assert.Equal(t, 1, st.Rules[0].Keys)
	assert.InDelta(t, 0.6, st.Rules[0].MeanShare, 1e-9, "ams's 60 of 100")
}

// A key without history is split by PoP count, and a region's aggregate
// (region voices: a node holds another region's counts as "region/*", and
// is told a region cut off with its aggregate) stands for the region's
// PoPs: one PoP only while none of them is named, by the store, the unheard
// set or SetPoPs.
func TestSharePoPSplitCountsARegionsPoPs(t *testing.T) {
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	for _, tc := range []struct {
		name    string
		self    identity.PoPID
		held    []identity.Replica // replicas whose counts the node holds
		pops    []string           // SetPoPs
		unheard []string
		want    float64
	}{
		{"every PoP speaking", ams, []identity.Replica{identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 1)},
			nil, []string{"ap/sin"}, 2.0 / 3},
		{"another region's aggregate held, its PoPs told", ams, []identity.Replica{identity.RegionReplica("us", 1)},
			[]string{"eu/fra", "us/iad", "us/sfo", "ap/sin"}, []string{"ap/sin", "ap/*"}, 0.8},
		{"the aggregates alone", ams, []identity.Replica{identity.RegionReplica("us", 1)},
			nil, []string{"ap/sin", "ap/*"}, 2.0 / 3},
		{"a region cut off named by its aggregate alone", ams, nil, nil, []string{"ap/*"}, 0.5},
		{"the cut side's PoPs told", identity.PoPID{Region: "ap", PoP: "sin"}, nil,
			[]string{"eu/ams", "eu/fra", "us/iad", "us/sfo"}, []string{"eu/ams", "eu/fra", "eu/*", "us/iad", "us/sfo", "us/*"}, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			self := identity.Replica{PoPID: tc.self, Node: "a", Incarnation: 1}
			n, err := New(Config{Self: self, Rules: []Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share}}})
			require.NoError(t, err)
			n.Link().SetEpoch(1)
			for _, r := range tc.held {
				st := n.Link().Apply(start, &wire.Delta{Sender: r, Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: start / W, Count: 5}}}, ScopeGlobal)
				require.Equal(t, 1, st.Merged, r)
			}
			n.Link().SetPoPs(tc.pops)
			n.Link().SetUnheard(start+W, tc.unheard)
			assert.InDelta(t, tc.want, n.Partition(start+W).SideShare, 1e-9)
		})
	}
}

// A key with no count in the window before the cut is split by its counts
// of the window the cut came in, once they are enough to measure; by PoP
// count otherwise.
func TestCurSide(t *testing.T) {
	unheard := map[string]bool{"us/iad": true}
	assert.InDelta(t, 0.75, curSide([]popCount{{"eu/ams", 300}, {"us/iad", 100}}, unheard, 0.5), 1e-9)
	assert.InDelta(t, 0.5, curSide([]popCount{{"eu/ams", 30}, {"us/iad", 10}}, unheard, 0.5), 1e-9)
	assert.InDelta(t, 0.5, curSide(nil, unheard, 0.5), 1e-9)
}

// A PoP taken for down holds this side to no share: its counts stay
// counted as they are, and the rest of the limit is this side's.
func TestDownPoPHoldsNoShare(t *testing.T) {
	eu, us := shareNodes(t, Share)
	now := t0
	for range 60 {
		_, _ = us.Decide(now, "api", "k", 1)
	}
	sync2(t, now, eu, us)
	eu.Link().SetDown(now, []string{"us/iad"})
	eu.Link().SetUnheard(now, nil)
	assert.False(t, eu.Partition(now).Partitioned)
	admitted := 0
	for range 60 {
		if d, err := eu.Decide(now, "api", "k", 1); err == nil && d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 40, admitted, "the limit less what us/iad counted")
}

// A region's aggregate (region voices) holds the counts of all its PoPs:
// unheard with all of them, it stays the other side's while one of them
// is, even once another PoP of its region is heard again (a heal noticed
// PoP by PoP); a PoP unheard alone leaves it heard.
func TestShareRegionAggregateStaysUnheard(t *testing.T) {
	rules := []Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share}}
	us, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "a", Incarnation: 1}, Rules: rules})
	require.NoError(t, err)
	W := int64(10 * time.Second)
	start := (t0/W + 1) * W
	for range 30 {
		_, _ = us.Decide(start, "api", "k", 1)
	}
	st := us.Link().Apply(start, &wire.Delta{Sender: identity.RegionReplica("eu", 1), SentAt: start, Epoch: 1,
		Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: start / W, Count: 70}}}, ScopeGlobal)
	require.Equal(t, 1, st.Merged)
	cut := start + W
	us.Link().SetUnheard(cut, []string{"eu/*", "eu/ams", "eu/fra"})
	p := us.Partition(cut)
	require.Len(t, p.Rules, 1)
	assert.InDelta(t, 0.3, p.Rules[0].MeanShare, 1e-9, "iad's 30 of 100")
	us.Link().SetUnheard(cut+1, []string{"eu/fra"})
	p = us.Partition(cut + 1)
	assert.InDelta(t, 0.3, p.Rules[0].MeanShare, 1e-9, "eu/ams heard again: eu's aggregate is still the other side's")
	assert.Equal(t, []string{"eu/fra"}, p.Unheard, "the status names the PoPs it was told")

	// A PoP unheard while its region's voice speaks leaves the aggregate
	// this side's.
	us.Link().SetUnheard(cut+2, nil)
	us.Link().SetUnheard(cut+int64(time.Second), []string{"eu/fra"})
	p = us.Partition(cut + int64(time.Second))
	assert.InDelta(t, 1, p.Rules[0].MeanShare, 1e-9, "eu's aggregate heard: this side's")
}
