package repl

import (
	"fmt"
	"strings"
	"testing"
)

// Tests of protocol defects the interaction scripts found once; each states
// the behaviour the package documentation promises.

// do runs harness commands (one a line; blank lines and # comments are
// skipped) and returns the output of the last one.
func (h *harness) do(t *testing.T, cmds string) string {
	t.Helper()
	var out string
	for i, line := range strings.Split(cmds, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = h.run(parseCmd(fmt.Sprintf("inline:%d", i+1), line))
		if strings.HasPrefix(out, "error:") {
			t.Fatalf("%s: %s", line, out)
		}
	}
	return out
}

// total returns node's current-window total of api/key.
func (h *harness) total(t *testing.T, node, key string) uint64 {
	t.Helper()
	n := h.node(node)
	v, err := n.n.View(h.nodeNow(n), "api", key)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Windows {
		if w.Index == h.nodeNow(n)/int64(ruleWindow) {
			return w.Total
		}
	}
	return 0
}

// threeMembers is eu/ams (a1 a2 a3, epoch 1; a2 owns the sync task) and
// us/iad (b1), at t=2.5s.
const threeMembers = `
config flush=50ms ae=1h timeout=2s hb=500ms expected=eu/ams,us/iad
node name=eu/ams/a1 inc=1 pop global
node name=us/iad/b1 inc=1 global
run until=2.2s
node name=eu/ams/a2 inc=2 pop global
node name=eu/ams/a3 inc=3 pop global
tick
members a1 a2 a3
join a2 from=a1
join a3 from=a1
run for=300ms
`

// Reconnected (and hearing a PoP again, and a heartbeat gap) makes the
// member that noticed ask for a sync, whichever member owns any task: a
// member whose own global link was down gets the other PoPs' totals at once
// (testdata/node_outage.txt).
func TestFixedReconnectedAsksWhoeverNoticed(t *testing.T) {
	h := newHarness(t)
	h.do(t, threeMembers)
	if got := h.do(t, "owners a1,a2,a3 task:sync"); got != "task:sync: a2\n" {
		t.Fatalf("sync task owner: %q, want a2", got)
	}
	h.do(t, `
cut a1 us/iad
decide b1 api k 40
run for=400ms
heal
reconnected a1
run for=1s
`)
	for _, n := range []string{"a2", "a3", "a1"} {
		if got := h.total(t, n, "k"); got != 40 {
			t.Errorf("%s: total %d after Reconnected, want 40 (us/iad's count)", n, got)
		}
	}
}

// A member that started its own epoch before its membership view came, and
// then joined the PoP's: the relay may send the PoP either epoch's
// aggregate as "former" state, and the members must not count it on top of
// the per-member counts they hold (testdata/diverged_epoch.txt).
func TestFixedRelayOfADivergedEpoch(t *testing.T) {
	h := newHarness(t)
	h.do(t, `
config flush=50ms ae=1h timeout=2s hb=500ms expected=eu/ams,us/iad
node name=eu/ams/a1 inc=5 pop global
node name=us/iad/b1 inc=1 global
run until=2.2s
node name=eu/ams/a2 inc=7 pop global
tick
members a1 a2
join a2 from=a1
decide a1 api k1 5
decide a2 api k1 1
decide b1 api k1 7
run for=300ms
node name=eu/ams/a3 inc=9 pop global
tick
decide a3 api k1 2
run for=160ms
members a1 a2 a3
deliver all
run for=300ms
cut eu/ams us/iad
run for=2.6s
heal
run for=1s
`)
	for _, n := range []string{"a1", "a2", "a3"} {
		if got := h.total(t, n, "k1"); got != 15 {
			t.Errorf("%s: total %d, want 15 (5+1+2 at eu/ams, 7 at us/iad)", n, got)
		}
	}
	// The other PoP holds what a3 published under its own short-lived epoch
	// (eu/ams/*#9 = 2) beside the PoP's (eu/ams/*#5 = 8, a3's 2 included):
	// an overcount of the diverged member's own counts, until the window
	// passes (see the package documentation).
	if got := h.total(t, "b1", "k1"); got != 17 {
		t.Errorf("b1: total %d, want 17 (15 and a3's 2 under its diverged epoch)", got)
	}
}

// SetMembers is documented to re-send "the totals of keys that moved"; it
// re-sends every owned total of every member (testdata/member_crash.txt).
// A cost, not a miscount.
func TestFixedMembershipChangeResendsEveryOwnedTotal(t *testing.T) {
	h := newHarness(t)
	h.do(t, threeMembers+`
decide a1 api k1,k2,k3,k4,k5,k6 1
run for=300ms
crash a2
`)
	// Owners before: k1 k2 k3 a3, k4 k5 a1, k6 a2; only k6 moves.
	out := h.do(t, "members a1 a3")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, "global delta") && !strings.Contains(line, "{api/k6=1}") {
			t.Errorf("re-sent more than the moved key k6: %s", line)
		}
	}
}

// While the members' views differ (a3 died; a1 noticed, a2 not yet), a
// member can forward its totals to a speaker that does not take them. The
// totals are re-sent once the views change, so the other PoPs converge
// without waiting for anti-entropy (an hour here).
func TestFixedForwardsLostWhileViewsDifferAreRepaired(t *testing.T) {
	h := newHarness(t)
	h.do(t, threeMembers)
	h.do(t, "crash a3")
	a1, a2 := h.node("a1"), h.node("a2")
	a1.c.SetMembers(h.nodeNow(a1), []string{MemberName(a2.rep)}) // only a1 noticed
	h.collect(a1)
	h.do(t, `
decide a1 api k1,k2,k3,k4,k5,k6 1
decide a2 api k1,k2,k3,k4,k5,k6 2
run for=400ms
members a1 a2
run for=400ms
`)
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6"} {
		want := h.total(t, "a1", k)
		if want != 3 {
			t.Fatalf("a1: %s total %d, want 3", k, want)
		}
		if got := h.total(t, "b1", k); got != want {
			t.Errorf("b1: %s total %d, want %d (eu/ams's)", k, got, want)
		}
	}
}
