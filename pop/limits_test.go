package pop

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// burstRule admits 3 per second and 5 per minute.
func burstRule() Rule {
	return Rule{Name: "burst", Limit: 3, Window: time.Second, Cost: 1, Scope: ScopeGlobal,
		More: []Limit{{Limit: 5, Window: time.Minute}}}
}

func tierRule() Rule {
	return Rule{Name: "plan", Limit: 2, Window: time.Minute, Cost: 1, Scope: ScopeGlobal,
		Overrides: []Override{{Key: "vip", Limits: []Limit{{Limit: 50, Window: time.Minute}}}},
		Tiers: map[string][]Limit{
			"free": {{Limit: 1, Window: time.Minute}},
			"pro":  {{Limit: 10, Window: time.Minute}},
		}}
}

func limitsNode(t *testing.T, self identity.Replica, rules ...Rule) *Node {
	t.Helper()
	n, err := New(Config{Self: self, Rules: rules})
	require.NoError(t, err)
	return n
}

func decideN(t *testing.T, n *Node, now int64, rule, key string, k int) (admitted int, last Decision) {
	t.Helper()
	for range k {
		d, err := n.Decide(now, rule, key, 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
		last = d
	}
	return admitted, last
}

func TestSeveralWindowsEveryWindowMustPass(t *testing.T) {
	n := limitsNode(t, replica("a", 1), burstRule())
	start := t0 - t0%int64(time.Minute) + int64(10*time.Second)

	ok, d := decideN(t, n, start, "burst", "k", 4)
	assert.Equal(t, 3, ok, "the 1s window admits 3")
	assert.False(t, d.Allowed)
	assert.EqualValues(t, 0, d.Binding, "the 1s window denies")
	assert.EqualValues(t, 3, d.Limit)
	assert.Equal(t, time.Second, d.RetryAfter.Round(time.Second))

	// Two seconds on, the burst window is free again, but the minute
	// window holds 3 of 5: two more fit, then the minute window binds.
	now := start + int64(2*time.Second)
	d, err := n.Decide(now, "burst", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 1, d.Binding, "least remaining: the minute window")
	assert.EqualValues(t, 5, d.Limit)
	assert.EqualValues(t, 1, d.Remaining)
	more := n.MoreAfter(now, mustHandle(n, "burst"), "k", d, Options{})
	assert.Positive(t, more, "the minute window frees a unit only in the next minute")
	assert.LessOrEqual(t, more, d.Reset)
	ok, d = decideN(t, n, now, "burst", "k", 3)
	assert.Equal(t, 1, ok)
	assert.False(t, d.Allowed)
	assert.EqualValues(t, 1, d.Binding)
	assert.Greater(t, d.RetryAfter, 40*time.Second, "the minute window frees up in the next minute")

	// A denied request counts in no window: the 1s window saw only the
	// admitted ones (1 of them in this second).
	d, err = n.Peek(now, "burst", "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	later := now + int64(30*time.Second)
	st := n.Link().State(later)
	require.Len(t, st, 1)
	counts := map[string]uint64{}
	for _, e := range st[0].Entries {
		counts[e.Rule] += e.Count
	}
	assert.Equal(t, map[string]uint64{"burst/1m": 5}, counts, "only admitted requests counted; the 1s windows have passed")
}

func TestSeveralWindowsReplicateUnderTheirWireNames(t *testing.T) {
	a := limitsNode(t, replica("a", 1), burstRule())
	b := limitsNode(t, replica("b", 1), burstRule())
	start := t0 - t0%int64(time.Minute)
	decideN(t, a, start, "burst", "k", 2)
	bt := a.Link().Flush(start, nil)
	names := map[string]uint64{}
	for _, e := range bt.Local.Entries {
		names[e.Rule] = e.Count
	}
	assert.Equal(t, map[string]uint64{"burst/1s": 2, "burst/1m": 2}, names)
	st := b.Link().Apply(start, &bt.Local, ScopePoP)
	assert.Equal(t, 2, st.Merged)
	ok, _ := decideN(t, b, start, "burst", "k", 3)
	assert.Equal(t, 1, ok, "b sees a's 2 in the 1s window")

	// A peer whose rule has one window refuses the entries by name.
	c := limitsNode(t, replica("c", 1), Rule{Name: "burst", Limit: 3, Window: time.Second, Cost: 1, Scope: ScopeGlobal})
	assert.Equal(t, 2, c.Link().Apply(start, &bt.Local, ScopePoP).UnknownRule)
	r, ok2 := b.WireRule("burst/1m")
	require.True(t, ok2)
	assert.Equal(t, time.Minute, r.Window)
	assert.EqualValues(t, 5, r.Limit)
}

func TestOverridesAndTiers(t *testing.T) {
	n := limitsNode(t, replica("a", 1), tierRule())
	tests := []struct {
		name, key, tier string
		want            int
	}{
		{"default", "k1", "", 2},
		{"unknown tier is the default", "k2", "gold", 2},
		{"free", "k3", "free", 1},
		{"pro", "k4", "pro", 10},
		{"override wins over the tier", "vip", "free", 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok := 0
			var last Decision
			for range 60 {
				d, err := n.DecideWith(t0, "plan", tt.key, 1, Options{Tier: tt.tier})
				require.NoError(t, err)
				if d.Allowed {
					ok++
				}
				last = d
			}
			assert.Equal(t, tt.want, ok)
			assert.EqualValues(t, min(tt.want, 60), last.Limit)
		})
	}
	// Decide applies overrides (no tier: the default).
	d, err := n.Decide(t0, "plan", "vip", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "vip spent its 50")
	// The count is per key whatever the tier: k4 spent 10, so free denies
	// it and pro too.
	d, err = n.DecideWith(t0, "plan", "k4", 1, Options{Tier: "free"})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.EqualValues(t, 1, d.Limit)
	// A cost above every limit the rule can give is an error; one above
	// the key's limit but within another tier's is a denial.
	_, err = n.DecideWith(t0, "plan", "k9", 51, Options{})
	assert.ErrorIs(t, err, ErrCostOverLimit)
	d, err = n.DecideWith(t0, "plan", "k9", 5, Options{Tier: "free"})
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	d, err = n.DecideWith(t0, "plan", "k9", 5, Options{Tier: "pro"})
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	ls, ok := n.Limits("plan", "k1", "pro")
	require.True(t, ok)
	assert.Equal(t, []Limit{{Limit: 10, Window: time.Minute}}, ls)
}

func TestDefaultTier(t *testing.T) {
	r := tierRule()
	r.DefaultTier = "free"
	n := limitsNode(t, replica("a", 1), r)
	d, err := n.DecideWith(t0, "plan", "k", 1, Options{Tier: "nope"})
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.Limit)
}

// TestApplyClampsToTheLargestLimit: counts of an override key above the
// rule's own limit replicate whole; above the largest limit they clamp.
func TestApplyClampsToTheLargestLimit(t *testing.T) {
	n := limitsNode(t, replica("a", 1), tierRule())
	w := t0 / int64(time.Minute)
	d := wire.Delta{Sender: replica("b", 1), Entries: []crdt.Entry{
		{Rule: "plan", Key: "vip", Window: w, Count: 40},
		{Rule: "plan", Key: "x", Window: w, Count: 500},
	}}
	st := n.Link().Apply(t0, &d, ScopePoP)
	assert.Equal(t, 2, st.Merged)
	assert.Equal(t, 1, st.Clamped)
	v, err := n.View(t0, "plan", "vip")
	require.NoError(t, err)
	require.Len(t, v.Windows, 1)
	assert.EqualValues(t, 40, v.Windows[0].Total)
	v, err = n.View(t0, "plan", "x")
	require.NoError(t, err)
	assert.EqualValues(t, 50, v.Windows[0].Total)
}

func TestOverrideReloadAppliesAtOnceAndKeepsCounts(t *testing.T) {
	r := burstRule()
	n := limitsNode(t, replica("a", 1), r)
	start := t0 - t0%int64(time.Minute)
	ok, _ := decideN(t, n, start, "burst", "k", 5)
	assert.Equal(t, 3, ok)
	r.Overrides = []Override{{Key: "k", Limits: []Limit{{Limit: 100, Window: time.Second}, {Limit: 100, Window: time.Minute}}}}
	require.NoError(t, n.SetRules([]Rule{r}))
	ok, d := decideN(t, n, start, "burst", "k", 100)
	assert.Equal(t, 97, ok, "the 3 counted before the reload stay")
	assert.EqualValues(t, 100, d.Limit)
}

func TestSeveralWindowsValidation(t *testing.T) {
	base := func(f func(*Rule)) Rule {
		r := tierRule()
		r.More = []Limit{{Limit: 100, Window: time.Hour}}
		r.Overrides = nil
		r.Tiers = nil
		f(&r)
		return r
	}
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"same window twice", base(func(r *Rule) { r.More = append(r.More, Limit{Limit: 5, Window: time.Minute}) }), "limits[2].window: 1m0s already used by limits[0]"},
		{"zero limit", base(func(r *Rule) { r.More[0].Limit = 0 }), "limits[1].limit: must be at least 1"},
		{"cost above a window", base(func(r *Rule) { r.Cost = 3 }), "cost: 3 exceeds limit 2"},
		{"name too long for the wire", base(func(r *Rule) { r.Name = strings.Repeat("n", 60) }), "name: a rule of several windows"},
		{"duplicate override", base(func(r *Rule) {
			r.Overrides = []Override{{Key: "a", Limits: []Limit{{Limit: 5, Window: time.Hour}}}, {Key: "a", Limits: []Limit{{Limit: 6, Window: time.Hour}}}}
		}), `overrides[1].key: "a" already overridden by overrides[0]`},
		{"override of an unknown window", base(func(r *Rule) {
			r.Overrides = []Override{{Key: "a", Limits: []Limit{{Limit: 5, Window: time.Second}}}}
		}), "overrides[0].limits[0].window: 1s is not one of the rule's windows"},
		{"override limit zero", base(func(r *Rule) {
			r.Overrides = []Override{{Key: "a", Limits: []Limit{{Limit: 0, Window: time.Hour}}}}
		}), "overrides[0].limits[0].limit: must be at least 1"},
		{"override without limits", base(func(r *Rule) { r.Overrides = []Override{{Key: "a"}} }), "overrides[0].limit: required"},
		{"empty override key", base(func(r *Rule) { r.Overrides = []Override{{Limits: []Limit{{Limit: 1, Window: time.Hour}}}} }), "overrides[0].key: must be 1-256 bytes"},
		{"unknown default tier", base(func(r *Rule) {
			r.Tiers = map[string][]Limit{"free": {{Limit: 1, Window: time.Hour}}}
			r.DefaultTier = "gold"
		}), `default_tier: unknown tier "gold"`},
		{"tier below cost", func() Rule {
			r := tierRule()
			r.Cost = 2
			return r
		}(), "limit: 1 is below the rule's cost 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRules([]Rule{tt.rule})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			n := limitsNode(t, replica("a", 1), tierRule())
			assert.Error(t, n.SetRules([]Rule{tt.rule}))
			ls, ok := n.Limits("plan", "vip", "")
			require.True(t, ok)
			assert.EqualValues(t, 50, ls[0].Limit, "a bad set changes nothing")
		})
	}
}

func TestWindowName(t *testing.T) {
	for w, want := range map[time.Duration]string{
		time.Second: "1s", 90 * time.Second: "90s", time.Hour: "1h", 5 * time.Minute: "5m", 1500 * time.Millisecond: "1500ms", 720 * time.Hour: "720h",
	} {
		assert.Equal(t, want, WindowName(w))
	}
}

// TestSeveralWindowsConcurrent: under concurrent decisions every admitted
// request counts in every window and no denied one counts in any (both
// windows' counts equal the admitted total), and the tighter window ends at
// most a few racing requests over its limit.
func TestSeveralWindowsConcurrent(t *testing.T) {
	r := Rule{Name: "c", Limit: 1000, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, More: []Limit{{Limit: 500, Window: time.Hour}}}
	n := limitsNode(t, replica("a", 1), r)
	start := t0 - t0%int64(time.Hour)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := 0
			for i := range 200 {
				d, err := n.Decide(start+int64(g*200+i), "c", "k", 1)
				require.NoError(t, err)
				if d.Allowed {
					ok++
				}
			}
			mu.Lock()
			admitted += ok
			mu.Unlock()
		}()
	}
	wg.Wait()
	counts := map[string]uint64{}
	for _, d := range n.Link().State(start + 2000) {
		for _, e := range d.Entries {
			counts[e.Rule] += e.Count
		}
	}
	assert.Equal(t, uint64(admitted), counts["c/1m"], "every admitted request in the minute window")
	assert.Equal(t, uint64(admitted), counts["c/1h"], "and in the hour window, no denied one in either")
	assert.GreaterOrEqual(t, admitted, 500)
	assert.LessOrEqual(t, admitted, 500+8, "at most one racing request per goroutine over the hour's limit")
}

func TestMoreAfter(t *testing.T) {
	n := limitsNode(t, replica("a", 1), Rule{Name: "r", Limit: 10, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal})
	start := t0 - t0%int64(10*time.Second)
	decideN(t, n, start, "r", "k", 10)
	// 11 s on the previous window weighs 9: one fits and leaves 0, and one
	// unit more frees when 10*(1-f)+1 <= 9, at f = 0.2, 1 s later.
	now := start + int64(11*time.Second)
	d, err := n.Decide(now, "r", "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.InDelta(t, float64(time.Second), float64(n.MoreAfter(now, mustHandle(n, "r"), "k", d, Options{})), 10)
	assert.Greater(t, d.Reset, 18*time.Second, "the whole limit is back much later")
	d, err = n.Decide(now, "r", "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, d.RetryAfter, n.MoreAfter(now, mustHandle(n, "r"), "k", d, Options{}))
	// A fresh key: nothing spent, nothing to wait for.
	assert.Zero(t, n.MoreAfter(now, mustHandle(n, "r"), "new", Decision{Allowed: true, Limit: 10, Remaining: 10}, Options{}))
}

// A rule's further windows are part of what replicas must agree on; a rule
// of one window hashes as it always has.
func TestFingerprintWindows(t *testing.T) {
	one := Rule{Name: "api", Limit: 20, Window: time.Second, Cost: 1, Scope: ScopeGlobal}
	two := one
	two.More = []Limit{{Limit: 1000, Window: time.Hour}}
	other := one
	other.More = []Limit{{Limit: 1000, Window: 2 * time.Hour}}
	assert.NotEqual(t, one.Fingerprint(), two.Fingerprint())
	assert.NotEqual(t, two.Fingerprint(), other.Fingerprint())
	same := two
	same.More = []Limit{{Limit: 1000, Window: time.Hour}}
	assert.Equal(t, two.Fingerprint(), same.Fingerprint())
}
