package repl

import (
	"fmt"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// syncVictim returns a core alone in its PoP (ams1) holding keys own counts
// and the former epoch 1 of PoP us/iad (now at epoch 2) with former keys, its
// first re-sends done, at a time past the start of the pacing.
func syncVictim(t *testing.T, keys, former int, interval time.Duration) (*Core, int64) {
	t.Helper()
	c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Relay: true, Settings: Settings{
		FlushInterval: 50 * time.Millisecond, AntiEntropyInterval: time.Hour, SyncInterval: interval}})
	if err != nil {
		t.Fatal(err)
	}
	n := popNode(c)
	for i := range keys {
		if _, err := n.Decide(t0, "api", fmt.Sprintf("k%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	now := t0
	c.Tick(now)
	iad := identity.PoPID{Region: "us", PoP: "iad"}
	old := &wire.Delta{Sender: identity.PoPReplica(iad, 1), SentAt: now, Epoch: 1}
	for i := range former {
		old.Entries = append(old.Entries, crdt.Entry{Rule: "api", Key: fmt.Sprintf("f%d", i), Window: now / int64(ruleWindow), Count: 1})
	}
	c.Step(now, Message{Link: LinkGlobal, Kind: KindDelta, From: iad, Delta: old})
	hb := heartbeatFrom(iad, now)
	hb.Delta.Epoch = 2 // us/iad restarted: epoch 1 is former
	c.Step(now, hb)
	for range 3 * int(interval/(50*time.Millisecond)) {
		now += int64(50 * time.Millisecond)
		c.Tick(now)
		c.Step(now, heartbeatFrom(iad, now))
		hbx := heartbeatFrom(iad, now)
		hbx.Delta.Epoch = 2
		c.Step(now, hbx)
	}
	c.Ready()
	return c, now
}

// answered returns the entries of the re-sends of owned totals and of the
// relayed state among msgs.
func answered(msgs []Message) (resent, relayed int) {
	for _, m := range msgs {
		switch {
		case m.Link == LinkGlobal && m.Kind == KindDelta && m.Reliable:
			resent += len(m.Delta.Entries)
		case m.Link == LinkGlobal && m.Kind == KindState:
			relayed += len(m.Delta.Entries)
		}
	}
	return resent, relayed
}

// Sync requests from anyone, however many nodes or PoPs they claim to come
// from, cost a node at most one re-send of its live state per SyncInterval:
// its owned totals once and the former epochs it holds once. Counted in
// entries on the pure core.
func TestSyncRequestsCostOneResendPerInterval(t *testing.T) {
	const (
		keys, former = 20000, 2000
		interval     = time.Second
		span         = 10 * interval
	)
	for _, tc := range []struct {
		name string
		from func(i int) (identity.PoPID, string)
	}{
		{"one node", func(int) (identity.PoPID, string) { return identity.PoPID{Region: "x", PoP: "evil"}, "n" }},
		{"a thousand nodes of one PoP", func(i int) (identity.PoPID, string) {
			return identity.PoPID{Region: "x", PoP: "evil"}, fmt.Sprintf("n%d", i%1000)
		}},
		{"a thousand PoPs", func(i int) (identity.PoPID, string) {
			return identity.PoPID{Region: "x", PoP: fmt.Sprintf("evil%d", i%1000)}, "n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now := syncVictim(t, keys, former, interval)
			start := now
			var resent, relayed, firstResent, firstRelayed, requests int
			// A request every millisecond for span.
			for now < start+int64(span) {
				now += int64(time.Millisecond)
				p, node := tc.from(requests)
				requests++
				c.Step(now, syncFrom(p, node, now))
				c.Tick(now)
				r, s := answered(c.Ready())
				resent += r
				relayed += s
				if now <= start+int64(interval) {
					firstResent, firstRelayed = resent, relayed
				}
			}
			intervals := int(span / interval)
			t.Logf("%d requests over %s: %d owned entries re-sent (%d in the first interval), %d former entries relayed (%d in the first)",
				requests, span, resent, firstResent, relayed, firstRelayed)
			if resent == 0 {
				t.Fatal("the requests were not answered")
			}
			if firstResent > keys || firstRelayed > former {
				t.Errorf("first interval: %d owned and %d former entries sent, want at most one copy (%d and %d)", firstResent, firstRelayed, keys, former)
			}
			if resent > (intervals+1)*keys || relayed > (intervals+1)*former {
				t.Errorf("%d owned and %d former entries sent over %d intervals, want at most one copy per interval (%d and %d)",
					resent, relayed, intervals, (intervals+1)*keys, (intervals+1)*former)
			}
		})
	}
}

// A PoP with a traffic share that asks for a sync amid requests from a
// thousand invented PoPs gets the former epochs within one SyncInterval:
// the paced relays serve PoPs whose counts were merged first.
func TestSyncRelayServesRealPoPsFirst(t *testing.T) {
	const interval = time.Second
	c, now := syncVictim(t, 100, 100, interval)
	fra := identity.PoPID{Region: "eu", PoP: "fra"}
	c.Step(now, Message{Link: LinkGlobal, Kind: KindDelta, From: fra, Delta: &wire.Delta{
		Sender: identity.PoPReplica(fra, 5), SentAt: now, Epoch: 5,
		Entries: []crdt.Entry{{Rule: "api", Key: "x", Window: now / int64(ruleWindow), Count: 1}}}})
	for i := range 1000 {
		now += int64(100 * time.Microsecond)
		c.Step(now, syncFrom(identity.PoPID{Region: "x", PoP: fmt.Sprintf("evil%03d", i)}, "n", now))
	}
	c.Ready()
	asked := now
	c.Step(now, syncFrom(fra, "f1", now))
	for now < asked+int64(interval+100*time.Millisecond) {
		now += int64(10 * time.Millisecond)
		c.Tick(now)
		for _, m := range c.Ready() {
			if m.Kind == KindState && m.To == fra && len(m.Delta.Entries) > 0 {
				t.Logf("relayed to %s %s after it asked", fra, time.Duration(now-asked))
				return
			}
		}
	}
	t.Fatalf("no relay to %s within %s of its request", fra, interval)
}
