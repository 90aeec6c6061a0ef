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
)

// recorder wraps a transport and records, per key, which node published it.
type recorder struct {
	Transport
	node string
	log  *publishLog
}

type publishLog struct {
	mu    sync.Mutex
	byKey map[string]map[string]bool // key -> publishing nodes
	msgs  map[string]int             // node -> delta messages published
}

func (r *recorder) Publish(kind Kind, msg []byte, reliable bool) error {
	if kind == KindDelta {
		d, err := crdt.Decode(msg)
		if err == nil {
			r.log.mu.Lock()
			r.log.msgs[r.node]++
			for _, e := range d.Entries {
				if r.log.byKey[e.Key] == nil {
					r.log.byKey[e.Key] = map[string]bool{}
				}
				r.log.byKey[e.Key][r.node] = true
			}
			r.log.mu.Unlock()
		}
	}
	return r.Transport.Publish(kind, msg, reliable)
}

func (r *recorder) Relay(to PoPID, msg []byte) error { return r.Transport.(Relayer).Relay(to, msg) }

// TestOneVoicePerPoP runs two PoPs of three nodes each (memberlist inside,
// one real nats-server between): every key's PoP total is published by one
// member of its PoP only, publishing is spread over the members, every
// message on the wire between PoPs carries a PoP aggregate (never a node's
// own count), and the other PoP converges to the exact totals.
func TestOneVoicePerPoP(t *testing.T) {
	ns := startNATS(t, nil)
	url := ns.ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Everything on the wire between PoPs, by subject.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	var wireMu sync.Mutex
	perSubject := map[string]int{}
	var perNodeSenders []string
	_, err = nc.Subscribe("geolimit.delta.>", func(m *nats.Msg) {
		d, err := crdt.Decode(m.Data)
		wireMu.Lock()
		defer wireMu.Unlock()
		perSubject[m.Subject]++
		if err == nil && !d.Sender.IsPoP() {
			perNodeSenders = append(perNodeSenders, d.Sender.String())
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	logs := map[PoPID]*publishLog{}
	var all []*member
	byPoP := map[PoPID][]*member{}
	for _, id := range []PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}} {
		logs[id] = &publishLog{byKey: map[string]map[string]bool{}, msgs: map[string]int{}}
		var join []string
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("%s-%d", id.PoP, i)
			n := newNode(t, id.Region, id.PoP, name, testRules())
			o := Options{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour, PeerTimeout: time.Second, EpochWait: 300 * time.Millisecond}
			o.PoP = MemberlistConnect(MemberlistConfig{
				Self: id, Name: fmt.Sprintf("%s#%d", name, n.Self().Incarnation), Bind: "127.0.0.1:0",
				Join: join, ProbeInterval: 200 * time.Millisecond,
			})
			inner := NATSConnect(NATSConfig{Self: id, Name: name, URL: url, ReconnectWait: 50 * time.Millisecond})
			log := logs[id]
			o.Global = func(h Handler) (Transport, error) {
				tr, err := inner(h)
				if err != nil {
					return nil, err
				}
				return &recorder{Transport: tr, node: name, log: log}, nil
			}
			m := startMember(t, ctx, n, o)
			join = append(join, mlAddr(m))
			all = append(all, m)
			byPoP[id] = append(byPoP[id], m)
		}
	}
	for _, ms := range byPoP {
		waitFor(t, 10*time.Second, "members see each other and share an epoch", func() bool {
			for _, m := range ms {
				st := m.rep.Status()
				if len(m.rep.Members()) != 2 || st.Epoch == 0 || st.Epoch != ms[0].rep.Status().Epoch {
					return false
				}
			}
			return true
		})
	}

	// Every node of ams counts 100 keys, each node its own share of them.
	const keys = 90
	ams := byPoP[PoPID{Region: "eu", PoP: "ams"}]
	want := map[string]uint64{}
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		for i, m := range ams {
			cost := uint64(i + 1)
			d, err := m.node.Decide(time.Now().UnixNano(), "api", key, cost)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			want[key] += cost
		}
	}
	waitFor(t, 15*time.Second, "iad sees ams's totals", func() bool {
		for _, m := range byPoP[PoPID{Region: "us", PoP: "iad"}] {
			for key, w := range want {
				if total(m.node, "api", key) != w {
					return false
				}
			}
		}
		return true
	})

	log := logs[PoPID{Region: "eu", PoP: "ams"}]
	log.mu.Lock()
	defer log.mu.Unlock()
	publishers := map[string]int{}
	for key := range want {
		nodes := log.byKey[key]
		require.Len(t, nodes, 1, "key %s published by %v: one publisher per key per PoP", key, nodes)
		for n := range nodes {
			publishers[n]++
		}
	}
	t.Logf("keys published per ams node: %v; delta messages per node: %v", publishers, log.msgs)
	assert.Len(t, publishers, 3, "publishing is spread over the PoP's members")
	for n, c := range publishers {
		assert.Greater(t, c, keys/10, "node %s publishes its share", n)
	}
	wireMu.Lock()
	defer wireMu.Unlock()
	assert.Empty(t, perNodeSenders, "only PoP aggregates cross PoPs")
	assert.NotZero(t, perSubject["geolimit.delta.eu.ams"])
	t.Logf("delta messages per subject: %v", perSubject)
}
