// Package frontendtest builds a front end's environment for tests: a real
// node core with a config's rules, a manual clock and the compiled rule
// snapshot, without the daemon around them.
package frontendtest

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
)

// T0 is the tests' start time: the start of a minute.
const T0 = int64(28_333_333) * int64(time.Minute)

// Env returns a front-end environment for the config yaml (its rules,
// proxy and rls sections): a node of its own, a manual clock at T0.
func Env(t testing.TB, yaml string) (frontend.Env, *clock.Manual) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rs, prules, err := frontend.Compile(cfg, func(string) *frontend.RuleMetrics { return &frontend.RuleMetrics{} })
	if err != nil {
		t.Fatal(err)
	}
	n, err := pop.New(pop.Config{Self: identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}, Rules: prules, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rs.Bind(n)
	p := &atomic.Pointer[frontend.Rules]{}
	p.Store(rs)
	clk := clock.NewManual(T0)
	return frontend.Env{Node: n, Clock: clk, Rules: p, Log: slog.New(slog.DiscardHandler)}, clk
}
