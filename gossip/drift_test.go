package gossip

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// TestDriftLogIsRateLimited: drift comes from the network, so a peer whose
// rules flap, or many peers at once, must not flood the log: a problem
// that comes back within a minute of being logged is not logged again, at
// most 100 lines go out a minute, and what was left out is counted in one
// line when the minute is over.
func TestDriftLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	r := &Replicator{clk: clk, log: slog.New(slog.NewTextHandler(&buf, nil))}
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	peer := identity.PoPID{Region: "us", PoP: "iad"}
	bad := []repl.PeerDrift{{PoPID: peer, Mismatches: []repl.RuleMismatch{{Rule: "api", WindowMS: 1000, PeerWindowMS: 2000}}}}
	ver := uint64(0)
	// A flapping rule, 1 000 changes in 10 s.
	for i := range 1000 {
		ver++
		if i%2 == 0 {
			r.logDrift(bad, ver)
		} else {
			r.logDrift(nil, ver)
		}
		clk.Advance(10 * time.Millisecond)
	}
	if got := lines(); len(got) != 2 || !strings.Contains(got[0], "global rule differs") || !strings.Contains(got[1], "drift resolved") {
		t.Fatalf("flapping rule logged %d lines, want its appearance and resolution once:\n%s", len(got), strings.Join(got, "\n"))
	}
	// The minute ends: one line counts what was left out (499 appearances).
	clk.Advance(time.Minute)
	r.drift.roll(r, clk.Now())
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "left out") || !strings.Contains(got[0], "lines=499") {
		t.Fatalf("end of the period: %q, want one line counting 499 left out", got)
	}
	// 500 PoPs, each with a new problem, at once: at most 100 lines.
	var many []repl.PeerDrift
	for i := range 500 {
		many = append(many, repl.PeerDrift{PoPID: identity.PoPID{Region: "r", PoP: fmt.Sprintf("p%d", i)}, Mismatches: []repl.RuleMismatch{{Rule: "api", Absent: true}}})
	}
	ver++
	r.logDrift(many, ver)
	if got := lines(); len(got) != driftLogBudget {
		t.Fatalf("500 new problems logged %d lines, want the budget of %d", len(got), driftLogBudget)
	}
	// A problem seen a period ago and back is logged again.
	clk.Advance(2 * time.Minute)
	ver++
	r.logDrift(nil, ver)
	lines()
	ver++
	r.logDrift(bad, ver)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "global rule differs") {
		t.Fatalf("problem back after two minutes: %q, want it logged", got)
	}
}
