package pop

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// BenchmarkApplyFleet merges deltas as the nodes of a large fleet receive
// them: 24 nodes (a simulator's process, or one node's store among other
// work: far more memory than the caches hold), each holding 1 000 keys
// counted by 200 other PoPs, so that every key's list of remote counts
// spans kilobytes. Each delta is 40 random keys of one PoP, to a random
// node; ns/entry is per merged entry.
func BenchmarkApplyFleet(b *testing.B) {
	const nodes, keys, pops, batch = 24, 1000, 200, 40
	created, _ := ipv4Keys(keys)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	w := now / int64(time.Minute)
	senders := make([]identity.Replica, pops)
	for p := range senders {
		senders[p] = identity.PoPReplica(identity.PoPID{Region: "r" + strconv.Itoa(p%10), PoP: "p" + strconv.Itoa(p)}, 1)
	}
	ns := make([]*Node, nodes)
	d := wire.Delta{Entries: make([]crdt.Entry, keys)}
	for i := range ns {
		ns[i] = benchNodeSeeded(b, created, now, uint64(i)+1)
		for _, s := range senders {
			d.Sender = s
			for k := range d.Entries {
				d.Entries[k] = crdt.Entry{Rule: "api", Key: created[k], Window: w, Count: 1}
			}
			ns[i].Link().Apply(now, &d, ScopeGlobal)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	d.Entries = d.Entries[:batch]
	count := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.Sender = senders[rng.IntN(pops)]
		count++
		for k := range d.Entries {
			d.Entries[k] = crdt.Entry{Rule: "api", Key: created[rng.IntN(keys)], Window: w, Count: count}
		}
		slices.SortFunc(d.Entries, func(a, b crdt.Entry) int { return strings.Compare(a.Key, b.Key) })
		ns[rng.IntN(nodes)].Link().Apply(now, &d, ScopeGlobal)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/batch, "ns/entry")
}
