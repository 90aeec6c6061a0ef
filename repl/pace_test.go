package repl

import (
	"strconv"
	"testing"
	"time"
)

// TestAntiEntropyIsPaced: a store of 20 000 keys sends its periodic
// anti-entropy round (of the keys that settled) in parts spread over the
// first half of the interval,
// each key's totals in exactly one part, where a small store sends one
// message at once.
func TestAntiEntropyIsPaced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keys      int
		wantParts int
	}{
		{"small store", 100, 1},
		{"large store", 20_000, 5}, // 20 000 / 4096 keys a part, rounded up
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ae = 2 * time.Second
			n := testNode(t, ams1)
			cfg := Config{Settings: DefaultSettings()}
			cfg.Node, cfg.GlobalLink = n.Link(), true
			cfg.FlushInterval, cfg.AntiEntropyInterval, cfg.PeerTimeout = 50*time.Millisecond, ae, 10*time.Second
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC).UnixNano()
			for i := range tc.keys {
				if _, err := n.Decide(t0, "api", "k"+strconv.Itoa(i), 1); err != nil {
					t.Fatal(err)
				}
			}
			// Tick every 10ms for three intervals and a half; the counts stay
			// put, so after the first flush only anti-entropy sends them.
			// Rounds are told apart by the core's count of rounds started:
			// the third one is watched (the first, the epoch's, re-sends
			// everything with the first flush; the second finds every count
			// changed since it, so not settled yet).
			seen := map[string]int{} // key -> parts of the third round that held it
			var sentAt []int64       // the third round's sends
			for now := t0; now < t0+int64(3*ae)+int64(ae/2); now += int64(10 * time.Millisecond) {
				c.Tick(now)
				round := c.Stats().AntiEntropies
				for _, m := range c.Ready() {
					if round != 3 || m.Link != LinkGlobal || m.Kind != KindDelta || !m.Reliable || len(m.Delta.Entries) == 0 {
						continue
					}
					sentAt = append(sentAt, now)
					for _, e := range m.Delta.Entries {
						seen[e.Key]++
					}
				}
			}
			if len(sentAt) != tc.wantParts {
				t.Fatalf("round sent in %d messages %v, want %d parts", len(sentAt), sentAt, tc.wantParts)
			}
			if len(seen) != tc.keys {
				t.Fatalf("round sent %d keys, want all %d", len(seen), tc.keys)
			}
			for k, c := range seen {
				if c != 1 {
					t.Fatalf("key %s sent in %d parts, want 1", k, c)
				}
			}
			// The parts are spread: the last goes out about half an interval
			// after the first, and no two at the same tick.
			if span := time.Duration(sentAt[len(sentAt)-1] - sentAt[0]); tc.wantParts > 1 &&
				(span < ae/2*time.Duration(tc.wantParts-1)/time.Duration(tc.wantParts)-10*time.Millisecond || span > ae/2) {
				t.Fatalf("parts sent over %s, want about %s", span, ae/2*time.Duration(tc.wantParts-1)/time.Duration(tc.wantParts))
			}
			for i := 1; i < len(sentAt); i++ {
				if sentAt[i] == sentAt[i-1] {
					t.Fatalf("parts %d and %d sent at the same tick", i-1, i)
				}
			}
		})
	}
}
