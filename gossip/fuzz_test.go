package gossip

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/wire"
)

// FuzzReceive feeds arbitrary bytes to the receive path (as a delta, a
// heartbeat and a sync request from another PoP and from the own PoP, as a
// region's totals, and as push/pull state): it must never panic, whatever arrives.
func FuzzReceive(f *testing.F) {
	d := wire.Delta{
		Sender:  identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 3),
		SentAt:  1,
		Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: 5, Count: 9}, {Rule: "per-ip", Key: "x", Window: 5, Count: 1}},
	}
	msgs, err := wire.Encode(&d, 0)
	require.NoError(f, err)
	f.Add(msgs[0])
	// Control entries: a heartbeat's rule fingerprints, a sync request
	// asking for a startup marker, and a marker (a state without entries).
	for _, c := range []wire.Delta{
		{Sender: identity.PoPReplica(identity.PoPID{Region: "us", PoP: "iad"}, 3), SentAt: 1, Entries: []crdt.Entry{{Rule: "api", Key: "fingerprint/1", Window: 60000, Count: 1 << 63}, {Rule: "nope", Key: "fingerprint/1", Window: -1, Count: 0}}},
		{Sender: identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "n", Incarnation: 3}, SentAt: 1, Epoch: 3, Entries: []crdt.Entry{{Rule: "geolimit/control", Key: "startup-sync/1", Count: 1}}},
		{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), SentAt: 1, Epoch: 1},
		// A region's totals (region voices).
		{Sender: identity.RegionReplica("us", 3), SentAt: 1, Epoch: 3, Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: 5, Count: 9}}},
	} {
		cm, err := wire.Encode(&c, 0)
		require.NoError(f, err)
		f.Add(cm[0])
	}
	f.Add([]byte{})
	f.Add([]byte{0x94, 0x01, 0x94})
	f.Add(append([]byte{byte(len(msgs[0]))}, msgs[0]...))
	n := newNode(f, "eu", "ams", "ams-1", testRules())
	r, err := Start(context.Background(), Options{Settings: repl.Settings{FlushInterval: time.Hour, AntiEntropyInterval: time.Hour}, Node: n.Link()})
	require.NoError(f, err)
	f.Cleanup(func() { _ = r.Close() })
	dec := wire.NewDecoder()
	var out wire.Delta
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range []inbound{
			{t: tGlobal, from: identity.PoPID{Region: "us", PoP: "iad"}, kind: KindDelta, data: b},
			{t: tGlobal, from: identity.PoPID{Region: "us", PoP: "iad"}, kind: KindHeartbeat, data: b},
			{t: tGlobal, from: identity.PoPID{Region: "us", PoP: "iad"}, kind: KindSync, data: b},
			{t: tGlobal, from: identity.PoPID{Region: "eu", PoP: "ams"}, kind: KindState, data: b},
			{t: tRegion, from: identity.PoPID{Region: "us", PoP: "iad"}, kind: KindRegion, data: b},
			{t: tPoP, from: identity.PoPID{Region: "eu", PoP: "ams"}, kind: KindDelta, data: b},
		} {
			r.apply(dec, &out, in)
		}
		r.mergeState(b)
	})
}
