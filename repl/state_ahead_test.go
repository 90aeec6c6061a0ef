package repl

import (
	"testing"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// A PoP that restarted answers a sync request with its former epoch's
// totals (its relay of what it held before) before any of its messages
// under its new epoch reached this node: the epoch it relays is the one
// this node still holds for its current one. That is the PoP ahead of this
// node's view of it, not a forgery: dropped, and counted as such. The same
// relay whose envelope names that epoch as current is forged (no PoP
// relays its current epoch), and so is another PoP's relay of it.
func TestStateOfAPoPAheadOfItsEpochIsDropped(t *testing.T) {
	c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true})
	if err != nil {
		t.Fatal(err)
	}
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	fra := identity.PoPID{Region: "eu", PoP: "fra"}
	for _, p := range []identity.PoPID{iad, fra} {
		if res := c.Step(t0, countsFrom(p, t0, "k", 3)); res.Forged || res.Dropped {
			t.Fatalf("counts of %v: %+v", p, res)
		}
	}
	state := func(from identity.PoPID, epoch uint64) Message {
		return Message{Link: LinkGlobal, Kind: KindState, From: from, Delta: &wire.Delta{
			Sender: identity.PoPReplica(iad, 1), SentAt: t0, Epoch: epoch,
			Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: t0 / int64(ruleWindow), Count: 3}}}}
	}
	if res := c.Step(t0, state(iad, 2)); res.Forged || !res.Dropped {
		t.Fatalf("iad relaying its epoch 1 from its epoch 2: %+v, want dropped", res)
	}
	if res := c.Step(t0, state(iad, 1)); !res.Forged {
		t.Fatalf("iad relaying its epoch 1 as current: %+v, want forged", res)
	}
	if res := c.Step(t0, state(fra, 5)); !res.Forged {
		t.Fatalf("fra relaying iad's current epoch: %+v, want forged", res)
	}
}
