package repl

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

func testNode(t testing.TB, r identity.Replica) *pop.Node {
	t.Helper()
	n, err := pop.New(pop.Config{Self: r, Rules: testRules()})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var ams1 = identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1", Incarnation: 1}

func TestConfigErrors(t *testing.T) {
	n := testNode(t, ams1)
	tests := []struct {
		name string
		mod  func(*Config)
		want string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no node", func(c *Config) { c.Node = nil }, "repl: config: node is required"},
		{"negative flush", func(c *Config) { c.FlushInterval = -time.Millisecond },
			"repl: config: flush_interval: must not be negative, got -1ms"},
		{"flush below 1ms", func(c *Config) { c.FlushInterval = 500 * time.Microsecond },
			"repl: config: flush_interval: want 0 (at once) or at least 1ms, got 500µs"},
		{"flush 1ms", func(c *Config) { c.FlushInterval = time.Millisecond }, ""},
		{"flush at once", func(c *Config) { c.FlushInterval = 0 }, ""},
		{"anti-entropy below flush", func(c *Config) { c.FlushInterval, c.AntiEntropyInterval = time.Second, 500*time.Millisecond },
			"repl: config: anti_entropy_interval: 500ms is below flush_interval 1s"},
		{"negative anti-entropy", func(c *Config) { c.FlushInterval, c.AntiEntropyInterval = 0, -time.Second },
			"repl: config: anti_entropy_interval: must be positive, got -1s"},
		{"anti-entropy equal to flush", func(c *Config) { c.FlushInterval, c.AntiEntropyInterval = time.Second, time.Second }, ""},
		{"heartbeat at peer timeout", func(c *Config) { c.HeartbeatInterval, c.PeerTimeout = 2*time.Second, 2*time.Second },
			"repl: config: heartbeat_interval: 2s must be below peer_timeout 2s"},
		{"heartbeat above peer timeout", func(c *Config) { c.HeartbeatInterval, c.PeerTimeout = 3*time.Second, time.Second },
			"repl: config: heartbeat_interval: 3s must be below peer_timeout 1s"},
		{"negative heartbeat", func(c *Config) { c.HeartbeatInterval = -time.Second },
			"repl: config: heartbeat_interval: must be positive, got -1s"},
		{"peer timeout too small for a heartbeat", func(c *Config) { c.PeerTimeout = 3 },
			"repl: config: heartbeat_interval: must be positive, got 0s"},
		{"negative peer timeout", func(c *Config) { c.PeerTimeout = -time.Second },
			"repl: config: peer_timeout: must be positive, got -1s"},
		{"negative epoch wait", func(c *Config) { c.EpochWait = -time.Second },
			"repl: config: epoch wait -1s is negative"},
		{"negative max batch", func(c *Config) { c.MaxBatchEntries = -1 },
			"repl: config: max_batch_entries: must be at least 1, got -1"},
		{"negative max pops", func(c *Config) { c.MaxPoPs = -1 },
			"repl: config: max_pops: must be at least 1, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Settings: DefaultSettings()}
			cfg.Node = n.Link()
			tt.mod(&cfg)
			c, err := New(cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if c == nil {
					t.Fatal("New returned no Core")
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New: error %v, want %q", err, tt.want)
			}
			if c != nil {
				t.Fatal("New returned a Core with an error")
			}
		})
	}
}

func TestConfigDefaultsFilled(t *testing.T) {
	cfg := Config{Node: testNode(t, ams1).Link(), Settings: Settings{PeerTimeout: 4 * time.Second}}
	if err := cfg.normalise(); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Node: cfg.Node,
		Settings: Settings{
			AntiEntropyInterval: 5 * time.Second,
			PeerTimeout:         4 * time.Second,
			HeartbeatInterval:   time.Second, // PeerTimeout/4
			MaxBatchEntries:     32768,
			MaxPoPs:             4096,
			ForgetAfter:         10 * time.Minute,
			SyncInterval:        250 * time.Millisecond,
		},
		EpochWait: 10 * time.Millisecond, // two flush intervals, at least 10ms
	}
	if fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Fatalf("normalised\n %+v\nwant\n %+v", cfg, want)
	}
	// FlushInterval 0 means "at once" and is kept.
	if cfg.FlushInterval != 0 {
		t.Fatalf("flush interval %s, want 0", cfg.FlushInterval)
	}
	cfg = Config{Node: cfg.Node, Settings: Settings{FlushInterval: 50 * time.Millisecond}}
	if err := cfg.normalise(); err != nil {
		t.Fatal(err)
	}
	if cfg.EpochWait != 100*time.Millisecond || cfg.HeartbeatInterval != 500*time.Millisecond {
		t.Fatalf("epoch wait %s, heartbeat %s: want 100ms, 500ms", cfg.EpochWait, cfg.HeartbeatInterval)
	}
}

// popNames returns ids as Settings.ExpectedPoPs lists them.
func popNames(ids ...identity.PoPID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func TestAdvance(t *testing.T) {
	tests := []struct{ next, now, every, want int64 }{
		{10, 5, 3, 10},  // not due: unchanged
		{10, 10, 3, 13}, // due exactly: one step
		{10, 12, 3, 13}, // within the first step
		{10, 13, 3, 16}, // on a step boundary: strictly after now
		{10, 100, 7, 101},
		{0, 0, 1, 1},
		{-5, 5, 10, 15},
	}
	for _, tt := range tests {
		if got := advance(tt.next, tt.now, tt.every); got != tt.want {
			t.Errorf("advance(%d, %d, %d) = %d, want %d", tt.next, tt.now, tt.every, got, tt.want)
		}
	}
	// Property: the result is the first of next + k*every (k >= 0) after now.
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 10000; i++ {
		next, now, every := rng.Int63n(1e6), rng.Int63n(1e6), 1+rng.Int63n(1e4)
		got := advance(next, now, every)
		switch {
		case got <= now && got != next:
			t.Fatalf("advance(%d, %d, %d) = %d: not after now", next, now, every, got)
		case (got-next)%every != 0 || got < next:
			t.Fatalf("advance(%d, %d, %d) = %d: off the grid", next, now, every, got)
		case got > next && got-every > now:
			t.Fatalf("advance(%d, %d, %d) = %d: skipped a slot", next, now, every, got)
		}
	}
}

// ownership returns, for each key, the member that owns it in members' own
// views, failing when the members disagree or no member (or two) own it.
func ownership(t *testing.T, members []string, keys []string) map[string]string {
	t.Helper()
	cores := make([]*Core, len(members))
	for i, m := range members {
		cores[i] = &Core{name: m}
		cores[i].setMembers(members)
	}
	own := make(map[string]string, len(keys))
	for _, k := range keys {
		var owners []string
		for i, c := range cores {
			if c.ownsKey(k) {
				owners = append(owners, members[i])
			}
		}
		if len(owners) != 1 {
			t.Fatalf("members %v: key %q owned by %v, want exactly one", members, k, owners)
		}
		own[k] = owners[0]
	}
	var taskOwners []string
	for i, c := range cores {
		if c.ownsTask("sync") {
			taskOwners = append(taskOwners, members[i])
		}
	}
	if len(taskOwners) != 1 {
		t.Fatalf("members %v: task owned by %v, want exactly one", members, taskOwners)
	}
	return own
}

func TestRendezvousMovesOnlyTheDepartedMembersKeys(t *testing.T) {
	rng := rand.New(rand.NewSource(20260101))
	keys := make([]string, 400)
	for i := range keys {
		keys[i] = fmt.Sprintf("203.0.113.%d/%d", i%256, i)
	}
	for trial := 0; trial < 200; trial++ {
		n := 2 + rng.Intn(10)
		members := make([]string, 0, n)
		for len(members) < n {
			m := fmt.Sprintf("n%d#%d", rng.Intn(50), rng.Intn(1e9))
			if !slices.Contains(members, m) {
				members = append(members, m)
			}
		}
		before := ownership(t, members, keys)

		// A member leaves: only its keys move, and they spread over the rest.
		gone := members[rng.Intn(n)]
		rest := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == gone })
		after := ownership(t, rest, keys)
		for _, k := range keys {
			if before[k] != gone && after[k] != before[k] {
				t.Fatalf("trial %d: %s left %v; key %q moved from %s to %s", trial, gone, members, k, before[k], after[k])
			}
		}

		// A member joins: keys move only to it.
		newcomer := fmt.Sprintf("new#%d", trial)
		joined := ownership(t, append(slices.Clone(members), newcomer), keys)
		for _, k := range keys {
			if joined[k] != before[k] && joined[k] != newcomer {
				t.Fatalf("trial %d: %s joined %v; key %q moved from %s to %s", trial, newcomer, members, k, before[k], joined[k])
			}
		}
	}
}

func TestRendezvousSpreadsKeys(t *testing.T) {
	members := []string{"a1#1", "a2#1", "a3#1"}
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	counts := map[string]int{}
	for _, o := range ownership(t, members, keys) {
		counts[o]++
	}
	for _, m := range members {
		if counts[m] < 800 || counts[m] > 1200 {
			t.Errorf("member %s owns %d of %d keys: %v", m, counts[m], len(keys), counts)
		}
	}
}

func TestSetMembersIgnoresSelfEmptyAndDuplicates(t *testing.T) {
	c := &Core{name: "b#1"}
	if !c.setMembers([]string{"c#1", "", "a#1", "b#1", "c#1"}) {
		t.Fatal("first view not installed")
	}
	if got := strings.Join(c.Members(), " "); got != "a#1 b#1 c#1" {
		t.Fatalf("members %q", got)
	}
	if c.rank != 1 {
		t.Fatalf("rank %d, want 1", c.rank)
	}
	if c.setMembers([]string{"a#1", "c#1"}) {
		t.Fatal("the same view reported as a change")
	}
}

func TestMissedBeats(t *testing.T) {
	const hb = int64(500 * time.Millisecond)
	c := &Core{cfg: Config{Settings: Settings{HeartbeatInterval: time.Duration(hb)}}}
	p := &peer{}
	steps := []struct {
		sentAt int64
		missed bool
		last   int64
	}{
		{t0, false, t0},                                 // first beat: nothing to compare
		{t0 + hb, false, t0 + hb},                       // next turn
		{t0 + hb, false, t0 + hb},                       // duplicate
		{t0 + hb/2, false, t0 + hb},                     // reordered: ignored
		{t0 + 3*hb, false, t0 + 3*hb},                   // one turn skipped (a member died): normal
		{t0 + 3*hb + 5*hb/2, false, t0 + 3*hb + 5*hb/2}, // two and a half intervals: still normal
		{t0 + 8*hb + 1, true, t0 + 8*hb + 1},            // more: a cut lost beats
		{t0 + 9*hb, false, t0 + 9*hb},
	}
	for i, s := range steps {
		if got := c.missedBeats(p, s.sentAt); got != s.missed {
			t.Errorf("step %d (sent %d): missed %v, want %v", i, s.sentAt-t0, got, s.missed)
		}
		if p.lastBeat != s.last {
			t.Errorf("step %d: lastBeat %d, want %d", i, p.lastBeat-t0, s.last-t0)
		}
	}
}

func popIDs(n int) []identity.PoPID {
	out := make([]identity.PoPID, n)
	for i := range out {
		out[i] = identity.PoPID{Region: "r", PoP: fmt.Sprintf("p%02d", i)}
	}
	return out
}

func heartbeatFrom(p identity.PoPID, at int64) Message {
	return Message{Link: LinkGlobal, Kind: KindHeartbeat, From: p,
		Delta: &wire.Delta{Sender: identity.Replica{PoPID: p, Node: "x", Incarnation: 1}, SentAt: at}}
}

func TestMaxPoPsBoundsTrackedPoPs(t *testing.T) {
	ids := popIDs(5)
	c, err := New(Config{
		Node: testNode(t, ams1).Link(), GlobalLink: true,
		Settings: Settings{MaxPoPs: 3, ExpectedPoPs: popNames(ids[:4]...)}, // one expected PoP is already beyond the bound
	})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.Tick(now)
	if got := len(c.RemotePoPs(now)); got != 3 {
		t.Fatalf("%d remote PoPs tracked, want 3", got)
	}
	for _, p := range ids {
		now += int64(time.Millisecond)
		c.Step(now, heartbeatFrom(p, now))
	}
	rps := c.RemotePoPs(now)
	if len(rps) != 3 {
		t.Fatalf("%d remote PoPs tracked after hearing %d, want 3", len(rps), len(ids))
	}
	for i, rp := range rps {
		if rp.PoPID != ids[i] || rp.Partitioned || rp.LastHeard == 0 {
			t.Errorf("remote %d: %+v", i, rp)
		}
	}
	if got := c.Stats().UnknownPoPs; got != 2 {
		t.Errorf("UnknownPoPs %d, want 2", got)
	}
	// The PoP itself never counts, even when listed.
	c2, err := New(Config{Node: testNode(t, ams1).Link(), Settings: Settings{MaxPoPs: 1, ExpectedPoPs: popNames(ams1.PoPID, ids[0])}})
	if err != nil {
		t.Fatal(err)
	}
	if rps := c2.RemotePoPs(t0); len(rps) != 1 || rps[0].PoPID != ids[0] {
		t.Errorf("remote PoPs %+v, want only %s", rps, ids[0])
	}
}

// A PoP beyond MaxPoPs is not tracked; its counts are not applied either
// (the Config comment only says such PoPs are "not counted as heard"). This
// test pins the behaviour.
func TestMaxPoPsDropsCountsOfUntrackedPoPs(t *testing.T) {
	ids := popIDs(2)
	c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: Settings{MaxPoPs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(t0)
	for _, p := range ids {
		agg := identity.PoPReplica(p, 7)
		res := c.Step(t0, Message{Link: LinkGlobal, Kind: KindDelta, From: p, Delta: &wire.Delta{
			Sender: agg, SentAt: t0, Epoch: 7,
			Entries: []crdt.Entry{{Rule: "api", Key: "k", Window: t0 / int64(ruleWindow), Count: 10}},
		}})
		if res.Forged {
			t.Fatalf("%s: forged", p)
		}
	}
	v, err := popNode(c).View(t0, "api", "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Windows) != 1 || v.Windows[0].Total != 10 {
		t.Fatalf("view %+v: want only the tracked PoP's 10", v.Windows)
	}
}

func TestNewRefusesIncarnationZero(t *testing.T) {
	n := testNode(t, identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a1"})
	_, err := New(Config{Node: n.Link()})
	if err == nil || !strings.Contains(err.Error(), "incarnation must not be 0") {
		t.Fatalf("New with incarnation 0: %v", err)
	}
}

// speakingCore returns a core of n (ams1) with one other member, a2, its
// PoP's epoch started (1), ticked at now, the start of a flush slot it
// speaks for, and nothing left ready.
func speakingCore(t *testing.T, n *pop.Node) (c *Core, a2 identity.Replica, now int64) {
	t.Helper()
	c, err := New(Config{Node: n.Link(), Settings: Settings{FlushInterval: 50 * time.Millisecond}, PoPLink: true, GlobalLink: true})
	if err != nil {
		t.Fatal(err)
	}
	a2 = identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a2", Incarnation: 2}
	c.SetMembers(0, []string{MemberName(a2)})
	now = int64(t0)
	c.Tick(now)
	now += int64(c.cfg.EpochWait)
	c.Tick(now)
	if c.Epoch() != 1 {
		t.Fatalf("epoch %d, want 1 (a1 is the first member and waited)", c.Epoch())
	}
	for !c.speaker(c.slotOf(now)) {
		now += int64(50 * time.Millisecond)
	}
	c.Tick(now)
	c.Ready()
	return c, a2, now
}

// A member's forwarded totals are published only for global rules the
// speaker knows, in live windows, for a slot no further from now than a
// member's clock may be; the rest is refused and counted.
func TestForwardedTotalsAreChecked(t *testing.T) {
	c, _, now := speakingCore(t, testNode(t, ams1))
	w := now / int64(ruleWindow)
	fwd := wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), SentAt: now, Epoch: 1, Entries: []crdt.Entry{
		{Rule: "api", Key: "good", Window: w, Count: 7},
		{Rule: "nope", Key: "k", Window: w, Count: 1},        // unknown rule
		{Rule: "ip", Key: "k", Window: w, Count: 1},          // pop-scope: never leaves the PoP
		{Rule: "api", Key: "old", Window: w - 5, Count: 1},   // dead window
		{Rule: "api", Key: "ahead", Window: w + 9, Count: 1}, // far ahead
	}}
	res := c.Step(now, Message{Link: LinkPoP, Kind: KindDelta, From: ams1.PoPID, Delta: &fwd})
	if res.Dropped || res.Forged {
		t.Fatalf("step: %+v", res)
	}
	far := fwd
	far.SentAt = now + int64(time.Hour)
	if res := c.Step(now, Message{Link: LinkPoP, Kind: KindDelta, From: ams1.PoPID, Delta: &far}); !res.Dropped {
		t.Errorf("a forward for a slot an hour away was taken")
	}
	c.Tick(now + int64(c.cfg.SpeakDelay))
	var got []crdt.Entry
	for _, m := range c.Ready() {
		if m.Link == LinkGlobal && m.Kind == KindDelta {
			got = append(got, m.Delta.Entries...)
		}
	}
	if len(got) != 1 || got[0].Key != "good" || got[0].Count != 7 {
		t.Errorf("published %+v, want only api/good=7", got)
	}
	if st := c.Stats(); st.ForwardsRefused != 4 || st.ForwardsDropped != 1 {
		t.Errorf("refused %d entries and dropped %d forwards, want 4 and 1", st.ForwardsRefused, st.ForwardsDropped)
	}
}

// With ExpectedPoPs set, a PoP heard once on an invented subject and then
// silent partitions nothing (the share policy keeps the whole limit), while
// an expected PoP's silence does. Without ExpectedPoPs, a silent PoP whose
// counts were merged does, one heard only through heartbeats does not.
func TestOnlyExpectedPoPsPartition(t *testing.T) {
	ids := popIDs(2) // ids[0] expected, or sends counts; ids[1] invented
	for _, tc := range []struct {
		name     string
		expected []identity.PoPID
		want     []identity.PoPID
	}{
		{"expected set", ids[:1], ids[:1]},
		{"none expected", nil, ids[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: Settings{ExpectedPoPs: popNames(tc.expected...)}})
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			c.Tick(now)
			for _, p := range ids {
				c.Step(now, heartbeatFrom(p, now))
			}
			c.Step(now, countsFrom(ids[0], now, "k", 3))
			for range 20 { // 5s: both silent for longer than the 2s peer timeout
				now += int64(250 * time.Millisecond)
				c.Tick(now)
			}
			got, _ := c.Partitioned()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("partitioned %v, want %v", got, tc.want)
			}
			for _, rp := range c.RemotePoPs(now) {
				if rp.Partitioned != slices.Contains(tc.want, rp.PoPID) || rp.Expected != slices.Contains(tc.expected, rp.PoPID) {
					t.Errorf("remote %+v", rp)
				}
			}
		})
	}
}

// countsFrom returns a delta of PoP p's totals (epoch 1): key's count n.
func countsFrom(p identity.PoPID, at int64, key string, n uint64) Message {
	return Message{Link: LinkGlobal, Kind: KindDelta, From: p, Delta: &wire.Delta{
		Sender: identity.PoPReplica(p, 1), SentAt: at, Epoch: 1,
		Entries: []crdt.Entry{{Rule: "api", Key: key, Window: at / int64(ruleWindow), Count: n}}}}
}

// A PoP that is not expected and stays silent for ForgetAfter is forgotten:
// gone from the unheard set and from RemotePoPs. An expected PoP never is.
func TestSilentUnexpectedPoPsAreForgotten(t *testing.T) {
	ids := popIDs(3)
	c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: Settings{ExpectedPoPs: popNames(ids[:1]...), ForgetAfter: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c.Tick(now)
	for _, p := range ids {
		c.Step(now, heartbeatFrom(p, now))
	}
	step := int64(250 * time.Millisecond)
	for now < t0+int64(9*time.Second) {
		now += step
		c.Tick(now)
		c.Step(now, heartbeatFrom(ids[2], now)) // ids[2] keeps talking
	}
	if got := len(c.RemotePoPs(now)); got != 3 {
		t.Fatalf("%d remote PoPs before ForgetAfter, want 3", got)
	}
	for now < t0+int64(11*time.Second) {
		now += step
		c.Tick(now)
		c.Step(now, heartbeatFrom(ids[2], now))
	}
	var got []identity.PoPID
	for _, rp := range c.RemotePoPs(now) {
		got = append(got, rp.PoPID)
	}
	if want := []identity.PoPID{ids[0], ids[2]}; !slices.Equal(got, want) {
		t.Fatalf("remote PoPs %v, want %v (ids[1] forgotten, expected ids[0] kept)", got, want)
	}
	if c.Stats().ForgottenPoPs != 1 {
		t.Errorf("ForgottenPoPs %d, want 1", c.Stats().ForgottenPoPs)
	}
	// Heard again, it is tracked again.
	c.Step(now, heartbeatFrom(ids[1], now))
	if got := len(c.RemotePoPs(now)); got != 3 {
		t.Fatalf("%d remote PoPs after ids[1] spoke again, want 3", got)
	}
}

// resends counts the re-sends of owned totals to other PoPs among msgs.
func resends(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		if m.Link == LinkGlobal && m.Kind == KindDelta && m.Reliable {
			n++
		}
	}
	return n
}

func syncFrom(p identity.PoPID, node string, at int64) Message {
	return Message{Link: LinkGlobal, Kind: KindSync, From: p,
		Delta: &wire.Delta{Sender: identity.Replica{PoPID: p, Node: node, Incarnation: 1}, SentAt: at}}
}

// Sync requests cannot make a node re-send its totals without bound: one
// re-send per SyncInterval answers the requests of one node or of many
// nodes and PoPs alike. A request is never lost: it is answered late.
func TestSyncRequestsArePaced(t *testing.T) {
	const interval = time.Second
	setup := func(t *testing.T) (*Core, int64) {
		c, err := New(Config{Node: testNode(t, ams1).Link(), GlobalLink: true, Settings: Settings{FlushInterval: 50 * time.Millisecond,
			AntiEntropyInterval: time.Hour, SyncInterval: interval}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := popNode(c).Decide(t0, "api", "k", 1); err != nil {
			t.Fatal(err)
		}
		now := t0
		c.Tick(now)
		for _, p := range popIDs(2) { // heard: their own re-sends happen now
			c.Step(now, heartbeatFrom(p, now))
		}
		for range 40 {
			now += int64(50 * time.Millisecond)
			c.Tick(now)
		}
		c.Ready()
		return c, now
	}
	// run feeds a request every 10ms for 10s and counts the re-sends.
	run := func(c *Core, now int64, req func(i int, now int64) Message) int {
		n := 0
		for i := range 1000 {
			now += int64(10 * time.Millisecond)
			c.Step(now, req(i, now))
			c.Tick(now)
			n += resends(c.Ready())
		}
		return n
	}
	p := popIDs(1)[0]
	t.Run("one requester", func(t *testing.T) {
		c, now := setup(t)
		n := run(c, now, func(_ int, now int64) Message { return syncFrom(p, "x", now) })
		// 10s of requests: one answer per second, the first at once.
		if n < 9 || n > 11 {
			t.Fatalf("%d re-sends for 1000 requests from one node over 10s, want 10 (one per %s)", n, interval)
		}
		if c.Stats().SyncThrottled == 0 {
			t.Error("no request counted as throttled")
		}
	})
	t.Run("many requesters", func(t *testing.T) {
		c, now := setup(t)
		n := run(c, now, func(i int, now int64) Message {
			return syncFrom(identity.PoPID{Region: "r", PoP: fmt.Sprintf("q%d", i%100)}, fmt.Sprintf("n%d", i), now)
		})
		// One per second, the first at once: at most 11 over 10s, where
		// unpaced answers would be one per 50ms coalescing interval (200).
		if n > 11 {
			t.Fatalf("%d re-sends for 1000 requests from 1000 nodes over 10s, want at most 11", n)
		}
		if n < 9 {
			t.Fatalf("%d re-sends: pacing must still answer, want about 10", n)
		}
		if c.Stats().ResendsDeferred == 0 {
			t.Error("no re-send counted as deferred")
		}
	})
	t.Run("late request answered", func(t *testing.T) {
		c, now := setup(t)
		c.Step(now, syncFrom(p, "x", now))
		for range 10 {
			now += int64(10 * time.Millisecond)
			c.Tick(now)
		}
		if n := resends(c.Ready()); n != 1 {
			t.Fatalf("%d re-sends for the first request, want 1", n)
		}
		c.Step(now, syncFrom(p, "x", now)) // within the interval: answered late
		got := 0
		for range 120 {
			now += int64(10 * time.Millisecond)
			c.Tick(now)
			got += resends(c.Ready())
		}
		if got != 1 {
			t.Fatalf("%d re-sends within 1.2s of a paced request, want 1", got)
		}
	})
}

// popNode returns the node core of c, which the tests build as a *pop.Node.
func popNode(c *Core) *pop.Node { return c.cfg.Node.(pop.Link).Node() }
