package gossip

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// recorder wraps a transport and records what its node sends.
type recorder struct {
	Transport
	node string
	log  *publishLog
}

type publishLog struct {
	mu        sync.Mutex
	forwarded map[string]map[string]bool // key -> members that forwarded its total
	spoke     map[string]int             // node -> delta messages published to other PoPs
	popSent   map[string]uint64          // node -> entries of the deltas published to the PoP's members
}

func (r *recorder) Publish(kind Kind, msg []byte, reliable bool) error {
	if kind == KindDelta {
		if d, err := wire.Decode(msg); err == nil {
			r.log.mu.Lock()
			if r.Name() == "nats" {
				r.log.spoke[r.node]++
			} else {
				r.log.popSent[r.node] += uint64(len(d.Entries))
				if d.Sender.IsPoP() {
					for _, e := range d.Entries {
						if r.log.forwarded[e.Key] == nil {
							r.log.forwarded[e.Key] = map[string]bool{}
						}
						r.log.forwarded[e.Key][r.node] = true
					}
				}
			}
			r.log.mu.Unlock()
		}
	}
	return r.Transport.Publish(kind, msg, reliable)
}

func (r *recorder) Relay(to identity.PoPID, msg []byte) error {
	return r.Transport.(Relayer).Relay(to, msg)
}

func (r *recorder) LocalName() string {
	return r.Transport.(interface{ LocalName() string }).LocalName()
}

// flushes returns how many flush slots m's core has flushed. It reads the
// count holding the Replicator's sendMu, which a tick of the core holds
// until the messages it made are handed to the transports: the messages of
// every flush counted are on their way.
func flushes(m *member) uint64 {
	m.rep.sendMu.Lock()
	defer m.rep.sendMu.Unlock()
	m.rep.mu.Lock()
	defer m.rep.mu.Unlock()
	return m.rep.core.Stats().Flushes
}

// popApplied returns the entries m applied from deltas of its PoP's members.
func popApplied(m *member) uint64 {
	for _, st := range m.rep.Stats() {
		if st.Scope == "pop" {
			return st.EntriesReceived
		}
	}
	return 0
}

// TestOneVoicePerPoP runs two PoPs of three nodes each (memberlist inside,
// one real nats-server between) on one manual clock, under traffic on many
// keys at every ams node: each key's total is computed by one member (its
// owner, which forwards it to the flush slot's speaker), the members take
// turns to speak, the PoP sends at most one delta message per flush slot on
// the wire (three members publishing their own shares would send three),
// only PoP aggregates cross PoPs, and the other PoP converges to the exact
// totals.
//
// The clock moves one flush interval at a time, and only once every ams
// member has flushed and applied what the others sent it: a forward always
// reaches the slot's speaker before the speaker's deadline, however the
// goroutines are scheduled. (On the wall clock a forward delayed past that
// deadline is published on its own, as it should be, and a count of
// messages per second of wall time then depends on the machine's load.)
func TestOneVoicePerPoP(t *testing.T) {
	ns := startNATS(t, nil)
	url := ns.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const flush, syncInterval = 50 * time.Millisecond, 250 * time.Millisecond
	clk := clock.NewManual(time.Now().UnixNano())

	// Every delta between PoPs sent by a node rather than a PoP.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	var wireMu sync.Mutex
	var perNodeSenders []string
	_, err = nc.Subscribe("geolimit.delta.>", func(m *nats.Msg) {
		d, err := wire.Decode(m.Data)
		wireMu.Lock()
		defer wireMu.Unlock()
		if err == nil && !d.Sender.IsPoP() {
			perNodeSenders = append(perNodeSenders, d.Sender.String())
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	logs := map[identity.PoPID]*publishLog{}
	byPoP := map[identity.PoPID][]*member{}
	for _, id := range []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}} {
		log := &publishLog{forwarded: map[string]map[string]bool{}, spoke: map[string]int{}, popSent: map[string]uint64{}}
		logs[id] = log
		var join []string
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("%s-%d", id.PoP, i)
			n := newNode(t, id.Region, id.PoP, name, testRules())
			// PeerTimeout is far longer than the test: the clock jumps, and
			// no PoP may count another as partitioned and resync.
			o := Options{Clock: clk, Settings: repl.Settings{FlushInterval: flush, SyncInterval: syncInterval, AntiEntropyInterval: time.Hour, PeerTimeout: time.Hour}}
			innerPoP := MemberlistConnect(MemberlistConfig{
				Self: id, Name: fmt.Sprintf("%s#%d", name, n.Link().Self().Incarnation), Bind: "127.0.0.1:0",
				Join: join, ProbeInterval: 200 * time.Millisecond,
			})
			o.PoP = func(h Handler) (Transport, error) {
				tr, err := innerPoP(h)
				if err != nil {
					return nil, err
				}
				return &recorder{Transport: tr, node: name, log: log}, nil
			}
			innerNATS := NATSConnect(NATSConfig{Self: id, Name: name, URL: url, ReconnectWait: 50 * time.Millisecond})
			o.Global = func(h Handler) (Transport, error) {
				tr, err := innerNATS(h)
				if err != nil {
					return nil, err
				}
				return &recorder{Transport: tr, node: name, log: log}, nil
			}
			m := startMember(t, ctx, n, o)
			join = append(join, m.rep.popT.(*recorder).Transport.(*Memberlist).Addr())
			byPoP[id] = append(byPoP[id], m)
		}
	}
	for _, ms := range byPoP {
		require.Eventually(t, func() bool {
			clk.Advance(time.Millisecond) // heartbeats and the epoch's agreement run on the clock
			for _, m := range ms {
				st := m.rep.Status()
				if len(m.rep.Members()) != 2 || st.Epoch == 0 || st.Epoch != ms[0].rep.Status().Epoch || len(m.rep.Heard()) != 1 {
					return false
				}
			}
			return true
		}, 10*time.Second, poll, "members see each other and share an epoch")
	}

	ams := byPoP[identity.PoPID{Region: "eu", PoP: "ams"}]
	log := logs[identity.PoPID{Region: "eu", PoP: "ams"}]
	// settled: every ams member applied every entry the others sent it.
	settled := func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		var sent uint64
		for _, n := range log.popSent {
			sent += n
		}
		for _, m := range ams {
			if popApplied(m) != sent-log.popSent[m.name] {
				return false
			}
		}
		return true
	}
	// step moves the clock one flush interval on, across one slot boundary,
	// and waits until each ams member flushed and the PoP link is quiet.
	step := func() {
		before := make([]uint64, len(ams))
		for i, m := range ams {
			before[i] = flushes(m)
		}
		clk.Advance(flush)
		require.Eventually(t, func() bool {
			for i, m := range ams {
				if flushes(m) <= before[i] {
					return false
				}
			}
			return settled()
		}, 10*time.Second, poll, "every ams member flushed and heard the others")
	}
	spokeSoFar := func() int {
		log.mu.Lock()
		defer log.mu.Unlock()
		n := 0
		for _, c := range log.spoke {
			n += c
		}
		return n
	}
	// The start-up's exchanges between PoPs (sync requests, and re-sends
	// paced at most one SyncInterval apart) put ams's totals on the wire
	// outside the flush slots. Without traffic, ams is done with them once
	// the clock has moved two SyncIntervals on without ams speaking.
	quietFor := int(2 * syncInterval / flush)
	for steps, quietSteps, last := 0, 0, -1; quietSteps < quietFor; steps++ {
		require.Less(t, steps, 100, "ams still speaking without traffic")
		step()
		if n := spokeSoFar(); n != last {
			last, quietSteps = n, 0
		} else {
			quietSteps++
		}
	}
	spokeBefore := spokeSoFar()

	// Traffic: in each of slots flush slots every ams node counts on three
	// keys of sixty. Then three quiet slots carry the last counts out: a
	// member's own counts reach a key's owner in the slot after they were
	// made (the members flush together), the owner forwards the total in
	// the next, and the speaker of that slot speaks when it ends.
	const slots, quiet = 20, 3
	want := map[string]uint64{}
	for slot := range slots {
		for i, m := range ams {
			for k := range 3 {
				key := fmt.Sprintf("k%02d", (slot*9+i*3+k)%60)
				d, err := m.node.Decide(clk.Now(), "api", key, 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				want[key]++
			}
		}
		step()
	}
	for range quiet {
		step()
	}
	require.Eventually(t, func() bool {
		for _, m := range byPoP[identity.PoPID{Region: "us", PoP: "iad"}] {
			for key, w := range want {
				if totalAt(m.node, clk.Now(), "api", key) != w {
					return false
				}
			}
		}
		return true
	}, 15*time.Second, poll, "iad sees ams's totals")
	wireMu.Lock()
	assert.Empty(t, perNodeSenders, "only PoP aggregates cross PoPs")
	wireMu.Unlock()

	log.mu.Lock()
	defer log.mu.Unlock()
	spoken := -spokeBefore
	for _, n := range log.spoke {
		spoken += n
	}
	t.Logf("ams: %d delta messages to other PoPs over %d flush slots", spoken, slots+quiet)
	assert.Positive(t, spoken)
	assert.LessOrEqual(t, spoken, slots+quiet, "at most one message per flush slot for the PoP, not one per member")
	owners := map[string]int{}
	for key, nodes := range log.forwarded {
		require.Len(t, nodes, 1, "key %s forwarded by %v: one owner per key", key, nodes)
		for n := range nodes {
			owners[n]++
		}
	}
	t.Logf("keys forwarded per ams member: %v; messages spoken per member: %v", owners, log.spoke)
	assert.Len(t, log.spoke, 3, "the members take turns to speak")
	assert.GreaterOrEqual(t, len(owners), 2, "ownership is spread over the members")
}

// totalAt returns the node's view at now of key's total under rule.
func totalAt(n *pop.Node, now int64, rule, key string) uint64 {
	v, err := n.View(now, rule, key)
	if err != nil {
		return 0
	}
	var sum uint64
	for _, w := range v.Windows {
		sum = max(sum, w.Total)
	}
	return sum
}
