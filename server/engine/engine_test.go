package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/server/engine"
	"github.com/geolimit/geolimit/server/frontend"
)

var self = identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}

func writeConfig(t *testing.T, path, y string) *config.Config {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(y), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	return cfg
}

func limitOf(a *engine.App, rule string) uint64 {
	return a.Env().Rules.Load().ByName[rule].Pop.Limit
}

// Options.CheckReload sees every valid reloaded config with its tokens
// before anything of it applies, and its error refuses the reload.
func TestCheckReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edge.yaml")
	cfg := writeConfig(t, path, "nats: {disabled: true}\nrules:\n  - {name: r, limit: 5, window: 1m}\n")
	var refuse atomic.Bool
	var seen atomic.Int32
	a, err := engine.New(engine.Options{Config: cfg, ConfigPath: path, Self: self, Clock: clock.NewManual(0), WatchInterval: -1,
		CheckReload: func(c *config.Config, tokens *frontend.Tokens) error {
			seen.Add(1)
			assert.Nil(t, tokens, "the file names no token file")
			if refuse.Load() {
				return errors.New("refused by the check")
			}
			return nil
		}})
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background(), engine.NATS{}))
	t.Cleanup(func() { assert.NoError(t, a.Close()) })

	refuse.Store(true)
	writeConfig(t, path, "nats: {disabled: true}\nrules:\n  - {name: r, limit: 7, window: 1m}\n")
	require.ErrorContains(t, a.Reload(), "refused by the check")
	assert.EqualValues(t, 5, limitOf(a, "r"), "nothing of a refused reload applies")
	assert.Equal(t, 1.0, reloads(t, a, "failed"))

	refuse.Store(false)
	require.NoError(t, a.Reload())
	assert.EqualValues(t, 7, limitOf(a, "r"))
	assert.EqualValues(t, 2, seen.Load())
	assert.Equal(t, 1.0, reloads(t, a, "ok"))

	// An invalid file never reaches the check.
	require.NoError(t, os.WriteFile(path, []byte("rules: [{name: r}]\n"), 0o600))
	require.Error(t, a.Reload())
	assert.EqualValues(t, 2, seen.Load())
}

// reloads is geolimit_config_reloads_total{result}.
func reloads(t *testing.T, a *engine.App, result string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "geolimit_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no geolimit_config_reloads_total{result=%q}", result)
	return 0
}

// With IgnoreListen the listen section is validated as its defaults, so a
// config built in Go may leave it empty; without, it is refused naming it.
func TestIgnoreListen(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.NATS.Disabled = true
	cfg.Rules = []config.Rule{{Name: "r", Limit: 1, Window: config.Duration(time.Minute)}}
	cfg.ApplyRuleDefaults()
	cfg.Listen = config.Listen{}
	_, err := engine.New(engine.Options{Config: cfg, Self: self, Clock: clock.NewManual(0)})
	require.ErrorContains(t, err, "listen.api")
	a, err := engine.New(engine.Options{Config: cfg, Self: self, Clock: clock.NewManual(0), IgnoreListen: true})
	require.NoError(t, err)
	require.NoError(t, a.Close(), "Close without Start")
	require.NoError(t, a.Close(), "and again")
}

// Start builds the replicator from the App and the NATS it is given, and
// Close closes it once.
func TestReplicatorGetsNATS(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.NATS.URL = "nats://127.0.0.1:4222"
	cfg.Rules = []config.Rule{{Name: "r", Limit: 1, Window: config.Duration(time.Minute)}}
	cfg.ApplyRuleDefaults()
	fr := &fakeReplicator{}
	var env engine.ReplicationEnv
	a, err := engine.New(engine.Options{Config: cfg, Self: self, Clock: clock.NewManual(0), IgnoreListen: true,
		NewReplicator: func(e engine.ReplicationEnv) (engine.Replicator, error) { env = e; return fr, nil }})
	require.NoError(t, err)
	require.Nil(t, a.Replicator(), "before Start")
	require.NoError(t, a.Start(context.Background(), engine.NATS{URL: cfg.NATS.URL}))
	assert.Same(t, a.Node(), env.Node)
	assert.Equal(t, "nats://127.0.0.1:4222", env.NATSURL)
	assert.Nil(t, env.NATS, "no server in process")
	assert.Same(t, a.Registry(), env.Registry)
	assert.Equal(t, fr, a.Replicator())
	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	assert.EqualValues(t, 1, fr.closed.Load())
}

type fakeReplicator struct{ closed atomic.Int32 }

func (f *fakeReplicator) Start(context.Context) error { return nil }
func (f *fakeReplicator) Status() engine.ReplicationStatus {
	return engine.ReplicationStatus{}
}
func (f *fakeReplicator) Close() error { f.closed.Add(1); return nil }
