package frontend_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
	"github.com/geolimit/geolimit/server/frontend/frontendtest"
)

const decideYAML = `
idempotency: {header: Idempotency-Key}
rules:
  - {name: user, key: "header:X-User", limit: 2, window: 1m, tiers: {pro: 5}}
  - {name: shadow, key: "header:X-User", limit: 1, window: 1m, mode: shadow}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [user], rule: user}
        - {entries: [user, plan], tier: plan, rule: user}
        - {entries: [user, "kind=vip"], rule: shadow}
        - {entries: [user, kind], rule: user}
`

// The answer of the pipeline: allowed, status, the header fields in
// order, the binding check, the repeat, and a denial's body.
func TestDecideAnswers(t *testing.T) {
	env, _ := frontendtest.Env(t, decideYAML)
	rs := env.Rules.Load()
	ask := func(idem string) frontend.Answer {
		o := origin("203.0.113.7", false, "GET", "/", "X-User", "u1")
		if idem != "" {
			o.Header.Set("Idempotency-Key", idem)
		}
		return env.DecideOrigin(rs, &o, 418, nil)
	}
	a := ask("op-1")
	require.True(t, a.Allowed)
	assert.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, "user", a.Rule.Pop.Name, "the enforce rule binds; the shadow rule never does")
	assert.Equal(t, "1", a.Headers.Value(frontend.FieldXRemaining))
	assert.False(t, a.Headers.Has(frontend.FieldRetryAfter))
	assert.False(t, a.Repeat)
	a.Put()

	a = ask("op-1")
	assert.True(t, a.Repeat)
	assert.Equal(t, "true", a.Headers.Value(frontend.FieldRepeat))
	h := http.Header{}
	a.Headers.Set(h)
	assert.Equal(t, "true", h.Get(frontend.HRepeat))
	a.Put()

	spent := ask("")
	spent.Put()
	a = ask("")
	defer a.Put()
	require.False(t, a.Allowed)
	assert.Equal(t, 418, a.Status, "the front end's deny status")
	assert.True(t, a.Headers.Has(frontend.FieldRetryAfter))
	assert.Contains(t, string(a.AppendDenied(nil)), `"rule":"user"`)
	var names []string
	for f := range frontend.NumFields {
		if a.Headers.Has(f) {
			names = append(names, f.Name())
		}
	}
	assert.Equal(t, []string{frontend.HPolicy, frontend.HRateLimit, frontend.HXLimit, frontend.HXRemaining, frontend.HXReset, frontend.HRetryAfter}, names, "in order")
}

// A strict request the pipeline refuses is answered with its error and
// counts nothing.
func TestDecideStrictError(t *testing.T) {
	env, _ := frontendtest.Env(t, decideYAML)
	cr := env.Rules.Load().ByName["user"]
	c := frontend.GetChecks(pop.Each, true)
	c.Add(cr, "u1", "", "", 6) // over every tier's limit
	a := env.Decide(c, http.StatusTooManyRequests, nil)
	defer a.Put()
	assert.ErrorIs(t, a.Err, pop.ErrCostOverLimit)
	assert.Equal(t, http.StatusBadRequest, a.Status)
	assert.False(t, a.Allowed)
}

// Checks.Add names every counter with Key, and the idempotency key with
// IdempotencyKey.
func TestAddNormalisesKeys(t *testing.T) {
	env, _ := frontendtest.Env(t, decideYAML)
	cr := env.Rules.Load().ByName["user"]
	c := frontend.GetChecks(pop.Each, false)
	defer c.Put()
	long := string(make([]byte, 300))
	ck := c.Add(cr, long, "", long, 1)
	assert.Equal(t, frontend.Key(long), ck.Key)
	assert.Equal(t, frontend.IdempotencyKey(long), ck.IdempotencyKey)
	assert.Equal(t, "u1", c.Add(cr, "u1", "", "", 1).Key, "a short key as it is")
}

type entry struct{ k, v string }

func (e entry) GetKey() string   { return e.k }
func (e entry) GetValue() string { return e.v }

func TestClassifyDescriptor(t *testing.T) {
	env, _ := frontendtest.Env(t, decideYAML)
	dom := env.Rules.Load().Domains["edge"]
	require.NotNil(t, dom)
	var sc frontend.DescriptorScratch
	tests := []struct {
		name              string
		entries           []entry
		ok                bool
		rule, value, tier string
	}{
		{"one entry", []entry{{"user", "u1"}}, true, "user", "u1", ""},
		{"the tier left out", []entry{{"user", "u1"}, {"plan", "pro"}}, true, "user", "u1", "pro"},
		{"a fixed value wins", []entry{{"user", "u1"}, {"kind", "vip"}}, true, "shadow", `u1|vip`, ""},
		{"another value: the open shape", []entry{{"user", "u|1"}, {"kind", "std"}}, true, "user", `u\|1|std`, ""},
		{"no shape", []entry{{"other", "x"}}, false, "", "", ""},
		{"an empty value", []entry{{"user", ""}}, false, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := frontend.ClassifyDescriptor(dom, tt.entries, &sc)
			require.Equal(t, tt.ok, ok)
			if !ok {
				return
			}
			assert.Equal(t, tt.rule, d.Rule.Pop.Name)
			assert.Equal(t, tt.value, d.Value)
			assert.Equal(t, tt.tier, d.Tier)
		})
	}
}
