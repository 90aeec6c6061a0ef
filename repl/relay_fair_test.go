package repl

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// A restarted real PoP (eu/fra, counted) asks once for a sync; one
// invented PoP whose ID sorts first (a/a), made "counted" by one count
// entry, asks every 50 ms. Served by ID it would starve fra for as long as
// it kept asking; fra gets its own former epoch at once.
func TestRelayNotStarvedByAPoPThatKeepsAsking(t *testing.T) {
	const interval = 250 * time.Millisecond
	c, now := syncVictim(t, 100, 100, interval)
	fra := identity.PoPID{Region: "eu", PoP: "fra"}
	evil := identity.PoPID{Region: "a", PoP: "a"}
	// fra had traffic at epoch 5: its counts are merged (it is counted).
	c.Step(now, Message{Link: LinkGlobal, Kind: KindDelta, From: fra, Delta: &wire.Delta{
		Sender: identity.PoPReplica(fra, 5), SentAt: now, Epoch: 5,
		Entries: []crdt.Entry{{Rule: "api", Key: "fra-key", Window: now / int64(ruleWindow), Count: 7}}}})
	// The attacker: one count entry makes it counted (a traffic share).
	c.Step(now, countsFrom(evil, now, "evil-key", 1))
	// The attacker asks for a sync every 50ms (a 30-byte message), from
	// before fra asks.
	nextEvil := now
	for range 40 {
		now += int64(10 * time.Millisecond)
		if now >= nextEvil {
			c.Step(now, syncFrom(evil, "n", now))
			nextEvil = now + int64(50*time.Millisecond)
		}
		c.Tick(now)
	}
	c.Ready()
	// fra restarts (every node): epoch 6, and asks for a sync once.
	now += int64(10 * time.Millisecond)
	req := syncFrom(fra, "f1", now)
	req.Delta.Epoch = 6
	req.Delta.Sender.Incarnation = 6
	c.Step(now, req)
	asked := now
	limit := asked + int64(20*interval)
	for now < limit {
		now += int64(10 * time.Millisecond)
		if now >= nextEvil {
			c.Step(now, syncFrom(evil, "n", now))
			nextEvil = now + int64(50*time.Millisecond)
		}
		hb := heartbeatFrom(fra, now)
		hb.Delta.Epoch = 6
		c.Step(now, hb)
		c.Tick(now)
		for _, m := range c.Ready() {
			if m.Kind == KindState && m.To == fra && len(m.Delta.Entries) > 0 {
				t.Logf("relayed to fra %s after it asked", time.Duration(now-asked))
				return
			}
		}
	}
	t.Fatalf("fra (restarted, counted) got no relay of its former epoch within %s (%d intervals): RelaysDeferred=%d Relays=%d",
		time.Duration(now-asked), 20, c.Stats().RelaysDeferred, c.Stats().Relays)
}

// No attacker. A heal: 30 real PoPs with traffic (IDs sorting before
// eu/fra) ask for a sync at once, and restarted eu/fra asks too. Queued for
// one paced relay per SyncInterval, fra would wait 30 intervals (7.5 s at
// the default 250 ms), past the default startup_sync (5 s); its own former
// epoch goes at once.
func TestRelayOfARestartedPoPNotQueuedBehindAHeal(t *testing.T) {
	const interval = 250 * time.Millisecond
	c, now := syncVictim(t, 100, 100, interval)
	fra := identity.PoPID{Region: "eu", PoP: "fra"}
	c.Step(now, Message{Link: LinkGlobal, Kind: KindDelta, From: fra, Delta: &wire.Delta{
		Sender: identity.PoPReplica(fra, 5), SentAt: now, Epoch: 5,
		Entries: []crdt.Entry{{Rule: "api", Key: "fra-key", Window: now / int64(ruleWindow), Count: 7}}}})
	others := popIDs(30) // region "r" < ... no: use region "a" so they sort first
	for i := range others {
		others[i].Region = "a"
		c.Step(now, countsFrom(others[i], now, "k", 1))
	}
	for range 10 { // 100ms: past the coalescing interval of the first relays
		now += int64(10 * time.Millisecond)
		c.Tick(now)
	}
	c.Ready()
	for _, p := range others {
		c.Step(now, syncFrom(p, "n", now))
	}
	req := syncFrom(fra, "f1", now)
	req.Delta.Epoch = 6
	c.Step(now, req)
	asked := now
	for now < asked+int64(20*time.Second) {
		now += int64(10 * time.Millisecond)
		c.Tick(now)
		for _, m := range c.Ready() {
			if m.Kind == KindState && m.To == fra && len(m.Delta.Entries) > 0 {
				d := time.Duration(now - asked)
				t.Logf("relayed to fra %s after it asked", d)
				if d > 5*time.Second {
					t.Errorf("fra's former epoch arrived %s after it asked: past the default startup_sync (5s)", d)
				}
				return
			}
		}
	}
	t.Fatal("never relayed")
}
