package pop

import (
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOnUnsureNotSynced(t *testing.T) {
	rules := []Rule{
		{Name: "login", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, OnUnsure: DenyUnsure},
		{Name: "per-ip", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopePoP, OnUnsure: DenyUnsure},
		{Name: "local", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopeNode, OnUnsure: DenyUnsure},
		{Name: "api", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopeGlobal},
		{Name: "watch", Limit: 5, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, OnUnsure: DenyUnsure, Mode: Shadow},
	}
	n, err := New(Config{Self: replica("a", 1), Rules: rules})
	require.NoError(t, err)
	n.Link().SetSynced(false)
	for _, tt := range []struct {
		rule    string
		allowed bool
		unsure  Unsure
	}{
		{"login", false, UnsureNotSynced},
		{"per-ip", false, UnsureNotSynced},
		{"local", true, UnsureNone}, // node scope has no former counts to wait for
		{"api", true, UnsureNone},   // on_unsure: allow
		{"watch", true, UnsureNotSynced},
	} {
		d, err := n.Decide(t0, tt.rule, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, tt.allowed, d.Allowed, tt.rule)
		assert.Equal(t, tt.unsure, d.Unsure, tt.rule)
		if tt.unsure != UnsureNone {
			assert.Equal(t, time.Second, d.RetryAfter, tt.rule)
			assert.Zero(t, d.Remaining, tt.rule)
		}
	}
	d, _ := n.Decide(t0, "watch", "k", 1)
	assert.True(t, d.ShadowDenied, "shadow mode reports what it would deny")
	v, err := n.View(t0, "login", "k")
	require.NoError(t, err)
	assert.Empty(t, v.Windows, "an unsure denial counts nothing")

	n.Link().SetSynced(true)
	d, err = n.Decide(t0, "login", "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, UnsureNone, d.Unsure)
}

func TestOnUnsureStoreFull(t *testing.T) {
	for _, tt := range []struct {
		policy  UnsurePolicy
		allowed bool
		unsure  Unsure
	}{
		{AllowUnsure, true, UnsureNone},
		{DenyUnsure, false, UnsureStoreFull},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			rules := []Rule{{Name: "login", Limit: 10, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, OnUnsure: tt.policy}}
			n, err := New(Config{Self: replica("a", 1), Rules: rules, MaxKeys: 8, Shards: 1, Seed: 1})
			require.NoError(t, err)
			// Fill the store with keys being limited (above half their
			// limit): none can be evicted.
			for i := 0; i < 8; i++ {
				for j := 0; j < 6; j++ {
					d, err := n.Decide(t0, "login", "k"+strconv.Itoa(i), 1)
					require.NoError(t, err)
					require.False(t, d.Untracked)
				}
			}
			d, err := n.Decide(t0, "login", "new", 1)
			require.NoError(t, err)
			assert.True(t, d.Untracked)
			assert.Equal(t, tt.allowed, d.Allowed)
			assert.Equal(t, tt.unsure, d.Unsure)
		})
	}
}

func TestOnUnsureNoHistoryUnderShare(t *testing.T) {
	rules := []Rule{{Name: "api", Limit: 100, Window: 10 * time.Second, Cost: 1, Scope: ScopeGlobal, OnPartition: Share, OnUnsure: DenyUnsure}}
	eu, err := New(Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}, Rules: rules})
	require.NoError(t, err)
	// Before the cut the key was seen; a window later the cut starts.
	d, err := eu.Decide(t0, "api", "known", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	cut := t0 + int64(10*time.Second)
	eu.Link().SetUnheard(cut, []string{"us/iad"})

	d, err = eu.Decide(cut, "api", "known", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a key with history gets its share")
	d, err = eu.Decide(cut, "api", "fresh", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "no history to derive a share from")
	assert.Equal(t, UnsureNoHistory, d.Unsure)

	eu.Link().SetUnheard(cut, nil)
	healed := cut + int64(time.Second) // past the heal hold
	d, err = eu.Decide(healed, "api", "fresh", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "outside partitions every key is judged by its counts")
}

func TestUnsureNames(t *testing.T) {
	assert.Equal(t, []string{"store_full", "not_synced", "no_history"}, func() (s []string) {
		for _, u := range UnsureReasons() {
			s = append(s, u.String())
		}
		return s
	}())
	for _, s := range []string{"allow", "deny"} {
		p, err := ParseUnsurePolicy(s)
		require.NoError(t, err)
		assert.Equal(t, s, p.String())
	}
	_, err := ParseUnsurePolicy("maybe")
	assert.Error(t, err)
}

// Keys without room in a full store are limited together, and a rule that
// fails closed counts nothing for them, whether the rule has one window or
// several.
func TestKeysWithoutRoom(t *testing.T) {
	for _, tt := range []struct {
		name  string
		more  []Limit
		deny  bool
		admit int // of 50 new keys, one request each
	}{
		{"one window", nil, false, 3},
		{"two windows", []Limit{{Limit: 100, Window: time.Hour}}, false, 3},
		{"one window, fail closed", nil, true, 0},
		{"two windows, fail closed", []Limit{{Limit: 100, Window: time.Hour}}, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rule := Rule{Name: "login", Limit: 3, Window: time.Minute, Cost: 1, Scope: ScopeGlobal, More: tt.more}
			if tt.deny {
				rule.OnUnsure = DenyUnsure
			}
			// Room for the 8 held keys in each window.
			n, err := New(Config{Self: replica("a", 1), Rules: []Rule{rule}, MaxKeys: 8 * (1 + len(tt.more)), Shards: 1, Seed: 1})
			require.NoError(t, err)
			for i := 0; i < 8; i++ { // every held key denied once: being limited
				for j := 0; j < 4; j++ {
					_, err := n.Decide(t0, "login", "k"+strconv.Itoa(i), 1)
					require.NoError(t, err)
				}
			}
			admitted := 0
			for i := 0; i < 50; i++ {
				d, err := n.Decide(t0, "login", "new"+strconv.Itoa(i), 1)
				require.NoError(t, err)
				assert.True(t, d.Untracked)
				if d.Allowed {
					admitted++
				} else if tt.deny {
					assert.Equal(t, UnsureStoreFull, d.Unsure)
				}
			}
			assert.Equal(t, tt.admit, admitted, "keys without room share the rule's limit")
			// Nothing a fail-closed rule denied was counted: the counter of
			// keys without room is still empty (seen by the same rule
			// failing open).
			rule.OnUnsure = AllowUnsure
			require.NoError(t, n.SetRules([]Rule{rule}))
			after := 0
			for i := 0; i < 10; i++ {
				d, err := n.Decide(t0, "login", "more"+strconv.Itoa(i), 1)
				require.NoError(t, err)
				if d.Allowed {
					after++
				}
			}
			want := 0 // the counter was spent above
			if tt.deny {
				want = 3
			}
			assert.Equal(t, want, after)
		})
	}
}
