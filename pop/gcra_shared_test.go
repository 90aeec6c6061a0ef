package pop

import (
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/wire"
)

func sharedGCRARule(scope Scope) Rule {
	r := gcraRule() // one request every 100ms, 3 at once
	r.Scope = scope
	return r
}

func sharedPair(t *testing.T, scope Scope) (a, b *Node) {
	t.Helper()
	var err error
	a, err = New(Config{Self: replica("a", 1), Rules: []Rule{sharedGCRARule(scope)}})
	require.NoError(t, err)
	b, err = New(Config{Self: replica("b", 1), Rules: []Rule{sharedGCRARule(scope)}})
	require.NoError(t, err)
	return a, b
}

func paceN(t *testing.T, n *Node, now int64, key string, k int) (admitted int) {
	t.Helper()
	for range k {
		d, err := n.Decide(now, "pace", key, 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestSharedGCRASpendsConcurrentAdmissionsOnce: two nodes of a PoP each
// admit within the burst alone; once their counts are merged, each paces
// by the sum, so neither spending is lost (no TAT is merged by its
// maximum), and a delta applied twice moves nothing.
func TestSharedGCRASpendsConcurrentAdmissionsOnce(t *testing.T) {
	for _, scope := range []Scope{ScopePoP, ScopeGlobal} {
		t.Run(scope.String(), func(t *testing.T) {
			a, b := sharedPair(t, scope)
			assert.Equal(t, 2, paceN(t, a, t0, "k", 2))
			assert.Equal(t, 2, paceN(t, b, t0, "k", 2))
			fa, fb := a.Link().Flush(t0, nil), b.Link().Flush(t0, nil)
			now := t0 + int64(time.Millisecond)
			require.Equal(t, 1, b.Link().Apply(now, &fa.Local, ScopePoP).Merged)
			require.Equal(t, 1, a.Link().Apply(now, &fb.Local, ScopePoP).Merged)
			assert.Equal(t, 1, a.Link().Apply(now, &fb.Local, ScopePoP).Unchanged, "a duplicate")

			// Both see 4 spent by now (the remote 2 dated by their merge, 1ms
			// on): 1 over the burst of 3, so a request fits again when 2 have
			// been earned back, 200ms after t0.
			for _, n := range []*Node{a, b} {
				d, err := n.Decide(now, "pace", "k", 1)
				require.NoError(t, err)
				assert.False(t, d.Allowed)
				assert.Equal(t, 199*time.Millisecond, d.RetryAfter)
				v, err := n.View(now, "pace", "k")
				require.NoError(t, err)
				assert.InDelta(t, 4, v.Estimate, 0.05)
				require.Len(t, v.Windows, 1)
				assert.Equal(t, uint64(4), v.Windows[0].Total)
			}
			later := t0 + int64(200*time.Millisecond)
			assert.Equal(t, 1, paceN(t, a, later, "k", 2), "a paces: one fits")
			fa = a.Link().Flush(later, nil)
			require.Equal(t, 1, b.Link().Apply(later, &fa.Local, ScopePoP).Merged)
			assert.Zero(t, paceN(t, b, later, "k", 1), "b has seen a's admission")
		})
	}
}

// TestSharedGCRARefusesTheEntriesOfItsPacer: the TATs are no counts: a
// remote entry naming the pacer is refused, and nothing of it is flushed.
func TestSharedGCRARefusesTheEntriesOfItsPacer(t *testing.T) {
	a, b := sharedPair(t, ScopePoP)
	paceN(t, a, t0, "k", 3)
	f := a.Link().Flush(t0, nil)
	require.Len(t, f.Local.Entries, 1)
	assert.Equal(t, "pace", f.Local.Entries[0].Rule)
	assert.Equal(t, uint64(3), f.Local.Entries[0].Count)
	bad := wire.Delta{Sender: replica("a", 1), Entries: []crdt.Entry{{Rule: "pace" + pacerWire, Key: "k", Window: 0, Count: 1 << 40}}}
	st := b.Link().Apply(t0, &bad, ScopePoP)
	assert.Equal(t, 1, st.WrongScope)
	assert.Equal(t, 3, paceN(t, b, t0, "k", 3), "b's pace is untouched")
	for _, e := range a.Link().AntiEntropy(t0, nil).Local.Entries {
		assert.Equal(t, "pace", e.Rule)
	}
}

// TestSharedGCRAAgainstOneExactPace is a seeded property test: nodes of a
// PoP decide a key's requests and exchange their counts with a random
// delay each, at most flush interval + latency. Against one exact GCRA of
// every admission at the time it was made (the true bucket level L):
//
//   - an admission at node i finds L + cost <= burst + the cost admitted
//     by other nodes that i had not merged yet (over-admission is bounded
//     by what is in flight);
//   - a denial at node i finds L + cost > burst - D/T, D the longest delay
//     from an admission to its merge (a node over-estimates L by at most
//     the pace's worth of that delay).
func TestSharedGCRAAgainstOneExactPace(t *testing.T) {
	const (
		nodes   = 3
		flush   = 50 * time.Millisecond
		latency = 20 * time.Millisecond
		steps   = 4000
	)
	rule := Rule{Name: "pace", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopePoP, Algorithm: GCRA, Burst: 10}
	rate := rule.GCRARate()
	dmax := int64(flush + latency)
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ns := make([]*Node, nodes)
		for i := range ns {
			n, err := New(Config{Self: replica(string(rune('a'+i)), 1), Rules: []Rule{rule}})
			require.NoError(t, err)
			ns[i] = n
		}
		type msg struct {
			at, sent int64
			to, from int
			d        wire.Delta
		}
		var inbox []msg
		// admits[j] lists node j's admissions; node i has merged every
		// admission of node j before watermark[i][j].
		type adm struct {
			at   int64
			cost uint64
		}
		admits := make([][]adm, nodes)
		var flushes [nodes][nodes][]int64 // sent times of j's deltas to i not yet merged
		var watermark, lastSent [nodes][nodes]int64
		tat := int64(0) // the exact GCRA of all admissions
		now := t0
		nextFlush := now + int64(flush)
		var admitted, denied int
		for step := 0; step < steps; step++ {
			// Traffic at about 3x the pace, in bursts.
			now += int64(rng.ExpFloat64() * float64(rate.Interval) / 3)
			for nextFlush <= now {
				for j, n := range ns {
					b := n.Link().Flush(nextFlush, nil)
					if len(b.Local.Entries) == 0 {
						continue
					}
					for i := range ns {
						if i != j {
							d := b.Local
							d.Entries = append([]crdt.Entry(nil), b.Local.Entries...)
							inbox = append(inbox, msg{at: nextFlush + rng.Int63n(int64(latency)+1), sent: nextFlush, to: i, from: j, d: d})
							flushes[i][j] = append(flushes[i][j], nextFlush)
							lastSent[i][j] = nextFlush
						}
					}
				}
				nextFlush += int64(flush)
			}
			sort.SliceStable(inbox, func(x, y int) bool { return inbox[x].at < inbox[y].at })
			for len(inbox) > 0 && inbox[0].at <= now {
				m := inbox[0]
				inbox = inbox[1:]
				ns[m.to].Link().Apply(m.at, &m.d, ScopePoP)
				fs := flushes[m.to][m.from]
				for k, s := range fs {
					if s == m.sent {
						fs = append(fs[:k], fs[k+1:]...)
						break
					}
				}
				flushes[m.to][m.from] = fs
				// Every admission before the flush tick preceding the
				// earliest delta still in flight has been merged.
				if len(fs) > 0 {
					watermark[m.to][m.from] = max(watermark[m.to][m.from], fs[0]-int64(flush))
				} else {
					watermark[m.to][m.from] = max(watermark[m.to][m.from], lastSent[m.to][m.from])
				}
			}
			i := rng.Intn(nodes)
			cost := uint64(1 + rng.Intn(2))
			level := max(tat, now) - now // the exact level, in ns
			d, err := ns[i].Decide(now, "pace", "k", cost)
			require.NoError(t, err)
			if d.Allowed {
				var unseen uint64
				for j := range ns {
					if j == i {
						continue
					}
					for _, a := range admits[j] {
						if a.at >= watermark[i][j] {
							unseen += a.cost
						}
					}
				}
				require.LessOrEqual(t, level+rate.Cost(cost), rate.Tolerance()+rate.Cost(unseen),
					"seed %d step %d: node %d admitted over the bound", seed, step, i)
				tat = max(tat, now) + rate.Cost(cost)
				admits[i] = append(admits[i], adm{now, cost})
				admitted++
			} else {
				require.Greater(t, level+rate.Cost(cost)+dmax, rate.Tolerance(),
					"seed %d step %d: node %d denied far under the burst", seed, step, i)
				denied++
			}
		}
		t.Logf("seed %d: admitted %d, denied %d", seed, admitted, denied)
		require.NotZero(t, admitted)
		require.NotZero(t, denied)
	}
}

// TestSharedGCRAKeepsItsTATsAcrossAReload: a rule set again unchanged goes
// on with its counts and its TATs, also with the default burst (the
// pacer's store window is then the rule's window); a node-scope rule made
// pop-scoped goes on with its TATs.
func TestSharedGCRAKeepsItsTATsAcrossAReload(t *testing.T) {
	r := sharedGCRARule(ScopePoP)
	r.Burst = 0 // the limit, 10
	n, err := New(Config{Self: replica("a", 1), Rules: []Rule{r}})
	require.NoError(t, err)
	require.Equal(t, 10, paceN(t, n, t0, "k", 11))
	require.NoError(t, n.SetRules([]Rule{r}))
	assert.Zero(t, paceN(t, n, t0, "k", 1), "the TAT is kept")
	v, err := n.View(t0, "pace", "k")
	require.NoError(t, err)
	require.Len(t, v.Windows, 1)
	assert.Equal(t, uint64(10), v.Windows[0].Total, "the counts are kept")

	node := r
	node.Scope = ScopeNode
	m, err := New(Config{Self: replica("a", 1), Rules: []Rule{node}})
	require.NoError(t, err)
	require.Equal(t, 10, paceN(t, m, t0, "k", 10))
	require.NoError(t, m.SetRules([]Rule{r}))
	assert.Zero(t, paceN(t, m, t0, "k", 1), "the node-scope TAT paces on")
}
