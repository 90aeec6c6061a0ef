package gossip

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// rvPoP is one PoP of a region-voices topology: its region's index in the
// super-cluster, its name and its number of nodes (memberlist inside).
type rvPoP struct {
	region int
	name   string
	nodes  int
}

// rvNode is one node of it, with a tap on what NATS hands it.
type rvNode struct {
	*member
	region int
	tap    *recvTap
}

// recvTap counts what the global transport hands a node, by the sending
// PoP's region (own or other) and transport kind. It wraps the
// Replicator's Handler: it sees exactly what the node receives.
type recvTap struct {
	Handler
	own string // the node's region

	mu     sync.Mutex
	counts map[tapKey]int
	froms  map[identity.PoPID]bool // PoPs of other regions whose deltas arrived
	hbs    map[identity.PoPID]int  // heartbeats by PoP
}

type tapKey struct {
	other bool // from another region
	kind  Kind
}

// kindRegionBeat counts, apart from the region totals, the heartbeats of a
// region's heartbeat turns that arrive on the region subjects (KindRegion
// messages of a node, not of a region's aggregate).
const kindRegionBeat Kind = 0xfe

func (tp *recvTap) Receive(from identity.PoPID, kind Kind, b []byte) {
	tp.mu.Lock()
	k := tapKey{other: from.Region != tp.own, kind: kind}
	if kind == KindRegion {
		if d, err := wire.Decode(b); err == nil && !d.Sender.IsPoP() {
			k.kind = kindRegionBeat
		}
	}
	tp.counts[k]++
	if k.other && kind == KindDelta {
		tp.froms[from] = true
	}
	if kind == KindHeartbeat || k.kind == kindRegionBeat {
		if tp.hbs == nil {
			tp.hbs = map[identity.PoPID]int{}
		}
		tp.hbs[from]++
	}
	tp.mu.Unlock()
	tp.Handler.Receive(from, kind, b)
}

// heartbeats returns how many heartbeats of PoP from arrived (with region
// voices, from another region: in its region's turns).
func (tp *recvTap) heartbeats(from identity.PoPID) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.hbs[from]
}

// snapshot returns a copy of the counts.
func (tp *recvTap) snapshot() map[tapKey]int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make(map[tapKey]int, len(tp.counts))
	for k, v := range tp.counts {
		out[k] = v
	}
	return out
}

// startRVNodes starts the PoPs of topo on super-cluster c with region
// voices set to voices: a PoP's first node joins nobody, its others join
// the first over memberlist; every node reaches NATS through its region's
// server. It waits until every node hears every other PoP.
func startRVNodes(t testing.TB, ctx context.Context, c *gossiptest.SuperCluster, voices bool, flush time.Duration, topo ...rvPoP) []*rvNode {
	t.Helper()
	return startRVNodesWith(t, ctx, c, voices, flush, nil, topo...)
}

// startRVNodesWith is startRVNodes with tweak applied to every node's NATS
// settings (nil: none).
func startRVNodesWith(t testing.TB, ctx context.Context, c *gossiptest.SuperCluster, voices bool, flush time.Duration, tweak func(*NATSConfig), topo ...rvPoP) []*rvNode {
	t.Helper()
	var expected []identity.PoPID
	for _, p := range topo {
		expected = append(expected, identity.PoPID{Region: c.Names[p.region], PoP: p.name})
	}
	var out []*rvNode
	for k, p := range topo {
		id := expected[k]
		var first *rvNode
		for i := range p.nodes {
			name := fmt.Sprintf("%s-%d", p.name, i+1)
			n := newNode(t, id.Region, id.PoP, name, testRules())
			o := Options{Settings: repl.Settings{FlushInterval: flush, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second, RegionVoices: new(voices)}}
			o.ExpectedPoPs = popNames(expected...)
			if p.nodes > 1 {
				var join []string
				if first != nil {
					join = []string{mlAddr(first.member)}
				}
				o.PoP = MemberlistConnect(MemberlistConfig{Self: id, Name: repl.MemberName(n.Link().Self()), Bind: "127.0.0.1:0", Join: join, ProbeInterval: 200 * time.Millisecond})
			}
			tap := &recvTap{own: id.Region, counts: map[tapKey]int{}, froms: map[identity.PoPID]bool{}}
			nc := NATSConfig{Self: id, Name: name, URL: c.ClientURL(p.region), ReconnectWait: 50 * time.Millisecond, PingInterval: time.Second, RegionVoices: voices}
			if tweak != nil {
				tweak(&nc)
			}
			connect := NATSConnect(nc)
			o.Global = func(h Handler) (Transport, error) {
				tap.Handler = h
				return connect(tap)
			}
			rn := &rvNode{member: startMember(t, ctx, n, o), region: p.region, tap: tap}
			if first == nil {
				first = rn
			}
			out = append(out, rn)
		}
	}
	require.Eventually(t, func() bool {
		for _, n := range out {
			if len(n.rep.Partitioned()) != 0 || len(n.rep.Members()) != popSize(topo, n.id)-1 {
				return false
			}
		}
		return true
	}, 30*time.Second, poll, "every PoP hears every other, every member its PoP")
	return out
}

func popSize(topo []rvPoP, id identity.PoPID) int {
	for _, p := range topo {
		if p.name == id.PoP {
			return p.nodes
		}
	}
	return 0
}

// waitVoices waits until each region has one voice PoP, the first of the
// region by name, which every node of the region agrees on, under one
// region epoch per region. Only a PoP whose counts were merged takes part
// in the election (without expected PoPs), so every node first spends one
// request of a key of its own.
func waitVoices(t testing.TB, nodes []*rvNode) {
	t.Helper()
	for _, n := range nodes {
		_, err := n.node.Decide(time.Now().UnixNano(), "api", "voice-"+n.name, 1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		first := map[string]string{}
		for _, n := range nodes {
			if f, ok := first[n.id.Region]; !ok || n.id.PoP < f {
				first[n.id.Region] = n.id.PoP
			}
		}
		epochs := map[string]uint64{}
		for _, n := range nodes {
			st := n.rep.Status()
			if st.RegionEpoch == 0 || st.RegionVoice != (n.id.PoP == first[n.id.Region]) {
				return false
			}
			if e, ok := epochs[n.id.Region]; ok && e != st.RegionEpoch {
				return false
			}
			epochs[n.id.Region] = st.RegionEpoch
		}
		return true
	}, 20*time.Second, poll, "one voice per region, one region epoch")
}

// rvTopology is three regions with two PoPs in eu (one of two nodes, the
// region's voice) and us, one in ap.
var rvTopology = []rvPoP{{0, "eu1", 2}, {0, "eu2", 1}, {1, "us1", 1}, {1, "us2", 1}, {2, "ap1", 1}}

// TestRegionVoicesConverge counts one global key in every PoP of three
// regions with region voices on: every node of every region converges to
// the exact total, other regions' counts reaching it only as region
// totals, and no node hears a PoP total of another region.
func TestRegionVoicesConverge(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us", "ap")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := startRVNodes(t, ctx, c, true, 20*time.Millisecond, rvTopology...)
	waitVoices(t, nodes)
	var admitted uint64
	for round := range 3 {
		for i, n := range nodes {
			for range i + 1 + round {
				d, err := n.node.Decide(time.Now().UnixNano(), "api", "k", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				admitted++
			}
		}
		require.Eventually(t, func() bool {
			for _, n := range nodes {
				if total(n.node, "api", "k") != admitted {
					return false
				}
			}
			return true
		}, 20*time.Second, poll, "round %d: every node holds the exact total %d", round, admitted)
	}
	for _, n := range nodes {
		v, err := n.node.View(time.Now().UnixNano(), "api", "k")
		require.NoError(t, err)
		for _, w := range v.Windows {
			for r := range w.Replicas {
				rep, err := identity.ParseReplica(r)
				require.NoError(t, err, r)
				if rep.Region != n.id.Region {
					assert.True(t, rep.IsRegion(), "%s holds %s: another region's counts only as its region's", n.name, r)
				}
			}
		}
		assert.Empty(t, n.tap.froms, "%s: PoP totals of another region arrived", n.name)
		for _, st := range n.rep.Stats() {
			assert.Zero(t, st.Forged, "%s %s", n.name, st.Scope)
			assert.Zero(t, st.DecodeErrors, "%s %s", n.name, st.Scope)
		}
		// Region totals are counted on a scope of their own, with their lag.
		st := n.rep.Stats()
		rs := st[len(st)-1]
		require.Equal(t, "region", rs.Scope, n.name)
		assert.NotZero(t, rs.MessagesReceived, n.name)
		assert.NotZero(t, rs.LagCount, n.name)
	}
}

// TestRegionVoicesInterRegionMessages counts, over a span of flush
// intervals with every PoP counting one global key at every flush, the
// messages one node receives from other regions. With region voices on,
// the deltas among them are region totals, one per other region and flush
// interval at most (inter-region delta messages per flush interval =
// regions - 1 per receiving node), and no PoP total of another region
// arrives; heartbeats stay one stream per PoP and are counted apart. The
// same run with region voices off shows the deltas growing with the other
// regions' PoPs instead.
func TestRegionVoicesInterRegionMessages(t *testing.T) {
	const flush = 50 * time.Millisecond
	const rounds = 40
	// Three regions of seven PoPs; the node counted is us/us2, a PoP that is
	// not its region's voice, and us/us1, the voice.
	topo := []rvPoP{{0, "eu1", 1}, {0, "eu2", 1}, {0, "eu3", 1}, {1, "us1", 1}, {1, "us2", 1}, {2, "ap1", 1}, {2, "ap2", 1}}
	const regions = 3
	perInterval, gwPerInterval := map[bool]float64{}, map[bool]float64{}
	for _, voices := range []bool{true, false} {
		t.Run(fmt.Sprintf("region_voices=%v", voices), func(t *testing.T) {
			c := gossiptest.StartSuperCluster(t, "eu", "us", "ap")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			nodes := startRVNodes(t, ctx, c, voices, flush, topo...)
			if voices {
				waitVoices(t, nodes)
			}
			var counted []*rvNode
			for _, n := range nodes {
				if n.id.Region == "us" {
					counted = append(counted, n)
				}
			}
			var admitted uint64
			round := func() {
				for _, n := range nodes {
					d, err := n.node.Decide(time.Now().UnixNano(), "api", "k", 1)
					require.NoError(t, err)
					require.True(t, d.Allowed)
					admitted++
				}
				// One flush interval per round: the counted node flushed.
				f := flushes(counted[1].member)
				require.Eventually(t, func() bool { return flushes(counted[1].member) > f }, 5*time.Second, poll, "a flush")
			}
			converged := func() bool {
				for _, n := range nodes {
					if total(n.node, "api", "k") != admitted {
						return false
					}
				}
				return true
			}
			round()
			require.Eventually(t, converged, 20*time.Second, poll, "warm-up converged")
			gwBefore := gatewayOutMsgs(t, c, 0, "us")
			before := make([]map[tapKey]int, len(counted))
			for i, n := range counted {
				before[i] = n.tap.snapshot()
			}
			start := time.Now()
			for range rounds {
				round()
			}
			span := time.Since(start)
			intervals := float64(span) / float64(flush)
			gw := gatewayOutMsgs(t, c, 0, "us") - gwBefore
			t.Logf("gateway eu -> us carried %d messages (%.2f per flush interval; region eu has 3 PoPs)", gw, float64(gw)/intervals)
			gwPerInterval[voices] = float64(gw) / intervals
			require.Eventually(t, converged, 20*time.Second, poll, "converged")
			for i, n := range counted {
				after := n.tap.snapshot()
				diff := func(k tapKey) int { return after[k] - before[i][k] }
				deltas := diff(tapKey{true, KindDelta})
				region := diff(tapKey{true, KindRegion})
				hbs := diff(tapKey{true, KindHeartbeat}) + diff(tapKey{true, kindRegionBeat})
				other := diff(tapKey{true, KindSync}) + diff(tapKey{true, KindState})
				t.Logf("%s (%s): over %s = %.1f flush intervals of %s, from other regions: %d region totals (%.2f per interval), %d PoP deltas (%.2f per interval), %d heartbeats (%.2f per interval), %d sync/state; %d regions, %d PoPs in other regions",
					n.name, map[bool]string{true: "region voices on", false: "region voices off"}[voices], span.Round(time.Millisecond), intervals, flush,
					region, float64(region)/intervals, deltas, float64(deltas)/intervals, hbs, float64(hbs)/intervals, other, regions, 5)
				// Heartbeats: one stream per PoP of the own region and, with
				// region voices, one per other region (its PoPs take turns),
				// where without every PoP of the fleet sends its own.
				beats := float64(span) / float64(time.Second/4) // PeerTimeout / 4
				own := diff(tapKey{false, KindHeartbeat}) + diff(tapKey{false, kindRegionBeat})
				ownPoPs := 0
				for _, p := range topo {
					if p.region == n.region && p.name != n.id.PoP {
						ownPoPs++
					}
				}
				t.Logf("%s: heartbeats per heartbeat interval: %.2f from the %d other PoPs of its region, %.2f from the other regions",
					n.name, float64(own)/beats, ownPoPs, float64(hbs)/beats)
				assert.InDelta(t, float64(ownPoPs), float64(own)/beats, 1, "%s: heartbeats from its region", n.name)
				if voices {
					assert.InDelta(t, float64(regions-1), float64(hbs)/beats, 1, "%s: heartbeats from the other regions: one stream per region", n.name)
				} else {
					assert.InDelta(t, 5, float64(hbs)/beats, 1.5, "%s: heartbeats from the other regions: one stream per PoP", n.name)
				}
				if voices {
					assert.Zero(t, deltas, "%s: no PoP delta of another region", n.name)
					assert.Empty(t, n.tap.froms, "%s: no PoP delta of another region", n.name)
					assert.NotZero(t, region, "%s: region totals arrive", n.name)
					// One per other region and flush interval at most (the span
					// may take in a slot more at either end).
					assert.LessOrEqual(t, float64(region), (regions-1)*(intervals+2), "%s: region totals per flush interval", n.name)
				} else {
					assert.Zero(t, region, "%s: no region totals with region voices off", n.name)
					assert.NotZero(t, deltas, "%s: PoP deltas from other regions", n.name)
				}
				if i == 1 {
					perInterval[voices] = float64(region+deltas) / intervals
				}
			}
		})
	}
	if len(perInterval) == 2 {
		t.Logf("inter-region delta messages per flush interval at us/us2: %.2f with region voices (regions - 1 = %d), %.2f without (PoPs of other regions = 5)",
			perInterval[true], regions-1, perInterval[false])
		assert.Less(t, perInterval[true], perInterval[false], "region voices send fewer inter-region deltas")
		t.Logf("gateway eu -> us: %.2f messages per flush interval with region voices, %.2f without", gwPerInterval[true], gwPerInterval[false])
		assert.Less(t, gwPerInterval[true], gwPerInterval[false], "the gateways carry fewer messages")
	}
}

// gatewayOutMsgs returns the messages region from's server has sent on its
// outbound gateway connection to region to.
func gatewayOutMsgs(t testing.TB, c *gossiptest.SuperCluster, from int, to string) int64 {
	t.Helper()
	gz, err := c.Servers[from].Gatewayz(&server.GatewayzOptions{Name: to})
	require.NoError(t, err)
	g := gz.OutboundGateways[to]
	require.NotNil(t, g, "outbound gateway to %s", to)
	require.NotNil(t, g.Connection, "outbound gateway to %s", to)
	return g.Connection.OutMsgs
}

// TestRegionVoicesForgedRegionTotals publishes by hand, on the region
// subject of us/iad, totals that claim to be another region's (and a PoP's,
// and a region's of no epoch): a PoP can speak only for its own region, so
// each is refused and counted as forged on the region scope, and none of
// their counts is taken. The real region totals still are.
func TestRegionVoicesForgedRegionTotals(t *testing.T) {
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := startRVNodes(t, ctx, c, true, 20*time.Millisecond, rvPoP{0, "ams", 1}, rvPoP{1, "iad", 1})
	waitVoices(t, nodes)
	ams, iad := nodes[0], nodes[1]
	_, err := iad.node.Decide(time.Now().UnixNano(), "api", "k", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return total(ams.node, "api", "k") == 1 }, 10*time.Second, poll, "us's totals reach eu")

	nc := attacker(t, c.ClientURL(0))
	subj := RegionSubject("", iad.id)
	gossiptest.WaitInterest(t, c.Servers[0], subj)
	now := time.Now().UnixNano()
	entries := []crdt.Entry{{Rule: "api", Key: "forged", Window: now / int64(time.Hour), Count: 1000}}
	forged := []identity.Replica{
		identity.RegionReplica("eu", 7),                // the receiver's own region
		identity.RegionReplica("ap", 7),                // a third region
		identity.PoPReplica(iad.id, 7),                 // a PoP total on the region subject
		identity.RegionReplica("us", 0),                // its own region, without an epoch
		{PoPID: iad.id, Node: "iad-1", Incarnation: 7}, // a node's own count
	}
	regionStats := func() TransportStats {
		st := ams.rep.Stats()
		return st[len(st)-1]
	}
	base, protocol := regionStats(), ams.rep.Status().Protocol.Forged
	// First, on ams's own region subject: its own PoP's, skipped as an echo
	// (it would arrive before what follows on the same connection). Its key
	// is another: iad takes it as eu's totals under epoch 7 (any PoP of eu
	// may say so), and may relay it back to ams once eu's real epoch makes
	// 7 a former one.
	gossiptest.WaitInterest(t, c.Servers[0], RegionSubject("", ams.id))
	echo := []crdt.Entry{{Rule: "api", Key: "echo", Window: entries[0].Window, Count: 1000}}
	publish(t, nc, RegionSubject("", ams.id), &wire.Delta{Sender: identity.RegionReplica("eu", 7), SentAt: now, Epoch: 7, Entries: echo})
	for _, s := range forged {
		publish(t, nc, subj, &wire.Delta{Sender: s, SentAt: now, Epoch: s.Incarnation, Entries: entries})
	}
	require.Eventually(t, func() bool { return regionStats().Forged-base.Forged == uint64(len(forged)) }, 10*time.Second, poll, "every forged message counted")
	rs := regionStats()
	assert.Equal(t, "region", rs.Scope)
	assert.EqualValues(t, len(forged), rs.Rejected-base.Rejected, "their entries refused")
	assert.EqualValues(t, len(forged), ams.rep.Status().Protocol.Forged-protocol)
	assert.Zero(t, total(ams.node, "api", "forged"), "no forged count taken")
	assert.Zero(t, ams.tap.snapshot()[tapKey{false, KindRegion}], "the own PoP's region subject is not handed over")

	// The real voice of us still counts.
	_, err = iad.node.Decide(time.Now().UnixNano(), "api", "k", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return total(ams.node, "api", "k") == 2 }, 10*time.Second, poll, "us's totals still reach eu")
	assert.EqualValues(t, len(forged), regionStats().Forged-base.Forged)
}

// TestRegionVoicesLargeFlush: a voice whose region totals of one flush
// exceed the NATS payload cap splits them into several messages, each
// under the region's aggregate, and the other region takes every one. The
// flush timer is off (an hour): the test flushes once by hand.
func TestRegionVoicesLargeFlush(t *testing.T) {
	const keys, maxPayload = 3000, 2048
	c := gossiptest.StartSuperCluster(t, "eu", "us")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := startRVNodesWith(t, ctx, c, true, time.Hour, func(nc *NATSConfig) { nc.MaxPayload = maxPayload },
		rvPoP{0, "eu1", 1}, rvPoP{1, "us1", 1})
	waitVoices(t, nodes)
	eu, us := nodes[0], nodes[1]
	regionStats := func(n *rvNode) TransportStats {
		st := n.rep.Stats()
		return st[len(st)-1]
	}
	before := regionStats(eu)
	now := time.Now().UnixNano()
	for i := range keys {
		d, err := eu.node.Decide(now, "api", fmt.Sprintf("key-%05d", i), 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	eu.rep.Flush()
	rs := regionStats(eu)
	parts, bytes := rs.MessagesSent-before.MessagesSent, rs.BytesSent-before.BytesSent
	t.Logf("one flush of %d keys' region totals went out in %d messages of at most %d bytes (%d bytes in all)", keys, parts, maxPayload, bytes)
	assert.Greater(t, parts, uint64(1), "split")
	assert.GreaterOrEqual(t, parts, bytes/maxPayload, "under the payload cap")
	assert.Zero(t, rs.SendErrors)
	require.Eventually(t, func() bool {
		for i := range keys {
			if total(us.node, "api", fmt.Sprintf("key-%05d", i)) != 1 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every key's region total reaches us")
	ur := regionStats(us)
	assert.Zero(t, ur.Forged)
	assert.Zero(t, ur.DecodeErrors)
	assert.GreaterOrEqual(t, ur.EntriesReceived, uint64(keys))
}
