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

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/repl"
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
}

func (r *recorder) Publish(kind Kind, msg []byte, reliable bool) error {
	if kind == KindDelta {
		if d, err := crdt.Decode(msg); err == nil {
			r.log.mu.Lock()
			if r.Name() == "nats" {
				r.log.spoke[r.node]++
			} else if d.Sender.IsPoP() {
				for _, e := range d.Entries {
					if r.log.forwarded[e.Key] == nil {
						r.log.forwarded[e.Key] = map[string]bool{}
					}
					r.log.forwarded[e.Key][r.node] = true
				}
			}
			r.log.mu.Unlock()
		}
	}
	return r.Transport.Publish(kind, msg, reliable)
}

func (r *recorder) Relay(to PoPID, msg []byte) error { return r.Transport.(Relayer).Relay(to, msg) }

func (r *recorder) LocalName() string {
	return r.Transport.(interface{ LocalName() string }).LocalName()
}

// TestOneVoicePerPoP runs two PoPs of three nodes each (memberlist inside,
// one real nats-server between) under steady traffic on many keys at every
// node: each key's total is computed by one member (its owner, which
// forwards it to the flush slot's speaker), the members take turns to speak,
// the PoP sends about one delta message per flush interval on the wire
// (three members publishing their own shares would send three), only PoP
// aggregates cross PoPs, and the other PoP converges to the exact totals.
func TestOneVoicePerPoP(t *testing.T) {
	ns := startNATS(t, nil)
	url := ns.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const flush = 50 * time.Millisecond

	// Everything on the wire between PoPs, by subject.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	var wireMu sync.Mutex
	counting := false
	perSubject := map[string]int{}
	var perNodeSenders []string
	_, err = nc.Subscribe("geolimit.delta.>", func(m *nats.Msg) {
		d, err := crdt.Decode(m.Data)
		wireMu.Lock()
		defer wireMu.Unlock()
		if counting {
			perSubject[m.Subject]++
		}
		if err == nil && !d.Sender.IsPoP() {
			perNodeSenders = append(perNodeSenders, d.Sender.String())
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	logs := map[PoPID]*publishLog{}
	byPoP := map[PoPID][]*member{}
	for _, id := range []PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}} {
		log := &publishLog{forwarded: map[string]map[string]bool{}, spoke: map[string]int{}}
		logs[id] = log
		var join []string
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("%s-%d", id.PoP, i)
			n := newNode(t, id.Region, id.PoP, name, testRules())
			o := Options{Settings: repl.Settings{FlushInterval: flush, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second}}
			innerPoP := MemberlistConnect(MemberlistConfig{
				Self: id, Name: fmt.Sprintf("%s#%d", name, n.Self().Incarnation), Bind: "127.0.0.1:0",
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
			for _, m := range ms {
				st := m.rep.Status()
				if len(m.rep.Members()) != 2 || st.Epoch == 0 || st.Epoch != ms[0].rep.Status().Epoch || len(m.rep.Heard()) != 1 {
					return false
				}
			}
			return true
		}, 10*time.Second, poll, "members see each other and share an epoch")
	}

	// Steady traffic: every ams node counts on many keys for a second.
	ams := byPoP[PoPID{Region: "eu", PoP: "ams"}]
	want := map[string]uint64{}
	wireMu.Lock()
	counting = true
	wireMu.Unlock()
	start := time.Now()
	for round := 0; time.Since(start) < time.Second; round++ {
		for i, m := range ams {
			key := fmt.Sprintf("k%02d", (round*3+i)%60)
			d, err := m.node.Decide(time.Now().UnixNano(), "api", key, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			want[key]++
		}
		time.Sleep(2 * time.Millisecond) // pacing the traffic, not waiting for a condition
	}
	require.Eventually(t, func() bool {
		for _, m := range byPoP[PoPID{Region: "us", PoP: "iad"}] {
			for key, w := range want {
				if total(m.node, "api", key) != w {
					return false
				}
			}
		}
		return true
	}, 15*time.Second, poll, "iad sees ams's totals")
	elapsed := time.Since(start)
	wireMu.Lock()
	counting = false
	msgs := perSubject["geolimit.delta.eu.ams"]
	assert.Empty(t, perNodeSenders, "only PoP aggregates cross PoPs")
	wireMu.Unlock()

	slots := float64(elapsed) / float64(flush)
	t.Logf("ams: %d delta messages on the wire in %.0f flush slots", msgs, slots)
	assert.Greater(t, msgs, 0)
	assert.Less(t, float64(msgs), 1.5*slots+5, "about one message per flush interval for the PoP, not one per member")

	log := logs[PoPID{Region: "eu", PoP: "ams"}]
	log.mu.Lock()
	defer log.mu.Unlock()
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
