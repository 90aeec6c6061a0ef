package repl

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/wire"
)

// TestBlocksTravelWithTheCounts: a member's penalty blocks (a delta with no
// counts) are merged, not taken for an announcement; the global ones a
// member forwards are checked and published by the slot's speaker.
func TestBlocksTravelWithTheCounts(t *testing.T) {
	n, err := pop.New(pop.Config{Self: ams1, Rules: []pop.Rule{
		{Name: "api", Limit: 10, Window: ruleWindow, Cost: 1, Scope: pop.ScopeGlobal, BlockFor: time.Minute},
		{Name: "ip", Limit: 10, Window: ruleWindow, Cost: 1, Scope: pop.ScopePoP, BlockFor: time.Minute},
		{Name: "plain", Limit: 10, Window: ruleWindow, Cost: 1, Scope: pop.ScopeGlobal},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, a2, now := speakingCore(t, n)
	until := now + int64(time.Minute)

	own := *blocks.Section.With(&wire.Delta{Sender: a2, SentAt: now, Epoch: 1}, []blocks.Block{{Rule: "ip", Key: "member", Until: until}}...)
	if res := c.Step(now, Message{Link: LinkPoP, Kind: KindDelta, From: ams1.PoPID, Delta: &own}); res.Applied.Blocks.Merged != 1 {
		t.Fatalf("a member's block: %+v", res.Applied)
	}
	if n.BlockedUntil(now, "ip", "member") != until {
		t.Errorf("the member's block was not merged")
	}
	if c.resendAt != 0 {
		t.Errorf("a delta of blocks was taken for an announcement")
	}

	fwd := *blocks.Section.With(&wire.Delta{Sender: identity.PoPReplica(identity.PoPID{Region: "eu", PoP: "ams"}, 1), SentAt: now, Epoch: 1}, []blocks.Block{
		{Rule: "api", Key: "good", Until: until},
		{Rule: "ip", Key: "k", Until: until},    // pop scope: never leaves the PoP
		{Rule: "plain", Key: "k", Until: until}, // no block_for
		{Rule: "nope", Key: "k", Until: until},  // unknown rule
	}...)
	if res := c.Step(now, Message{Link: LinkPoP, Kind: KindDelta, From: ams1.PoPID, Delta: &fwd}); res.Dropped || res.Forged {
		t.Fatalf("step: %+v", res)
	}
	c.Tick(now + int64(c.cfg.SpeakDelay))
	var got []blocks.Block
	for _, m := range c.Ready() {
		if m.Link == LinkGlobal && m.Kind == KindDelta {
			if !m.Delta.Sender.IsPoP() {
				t.Errorf("published by %s, not the PoP", m.Delta.Sender)
			}
			got = append(got, blocks.Section.Items(m.Delta)...)
		}
	}
	if len(got) != 1 || got[0].Key != "good" || got[0].Until != until {
		t.Errorf("published %+v, want only api/good", got)
	}
	if st := c.Stats(); st.ForwardsRefused != 3 {
		t.Errorf("refused %d forwarded blocks, want 3", st.ForwardsRefused)
	}
}
