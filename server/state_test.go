package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/clock"
	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/internal/statefile"
	"github.com/geolimit/geolimit/server/internal/servertest"
	"github.com/geolimit/geolimit/wire"
)

func stateYAML(path string) string {
	return fmt.Sprintf(`
state: {file: %q, interval: 20ms}
rules:
  - {name: login, limit: 10, window: 1h, scope: global}
  - {name: per-ip, limit: 10, window: 1h, scope: pop}
  - {name: local, limit: 10, window: 1h, scope: node}
`, path)
}

// spendAll admits n requests on each rule over HTTP and returns how many were
// admitted in all.
func (ta *testApp) spendAll(n int) int {
	admitted := 0
	for _, rule := range []string{"login", "per-ip", "local"} {
		for range n {
			r := ta.Post("/v1/check", fmt.Sprintf(`{"rule":%q,"key":"mallory"}`, rule))
			require.Contains(ta.T, []int{200, 429}, r.Status, "%s", r.Body)
			if r.Status == 200 {
				admitted++
			}
		}
	}
	return admitted
}

// restarted starts the node's next incarnation on yaml.
func restarted(t *testing.T, yaml string) *testApp {
	return startApp(t, yaml, func(o *Options) {
		o.Self = testSelf
		o.Self.Incarnation++
	})
}

// A single node with state.file restarts without forgetting: neither a
// graceful restart nor a crash (the next incarnation reads what was on disk
// at the moment of the crash, the last periodic write) gives an attacker a
// fresh budget.
func TestStateFileRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "crash"}[crash], func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			a := startApp(t, stateYAML(path))
			require.Equal(t, 30, a.spendAll(10))
			require.Zero(t, a.spendAll(1), "the limits are spent")
			next := path
			if crash {
				// Wait for a periodic write holding every admit, and take
				// the file as it is: the process dies here, no shutdown hook
				// runs for it.
				require.Eventually(t, func() bool {
					st, err := statefile.Read(path)
					return err == nil && stateTotal(st) == 30
				}, wait, poll, "a periodic write with every admit")
				next = filepath.Join(dir, "crashed")
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(next, b, 0o600))
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, a.App.Shutdown(ctx))
			}
			b := restarted(t, stateYAML(next))
			assert.Equal(t, 200, b.Get("/readyz").Status)
			assert.Zero(t, b.spendAll(10), "the restarted node must not admit the spent limits again")
			assert.Equal(t, uint64(10), b.KeyTotal("login", "mallory"))
			v, ok := servertest.MetricValue(b.Scrape(), "geolimit_state_loads_total", "result", "ok")
			assert.True(t, ok)
			assert.Equal(t, 1.0, v)
		})
	}
}

func stateTotal(st *statefile.State) uint64 {
	var n uint64
	for _, d := range st.Deltas {
		for _, e := range d.Entries {
			n += e.Count
		}
	}
	return n
}

// A corrupt or truncated state file is logged, counted and moved aside; the
// node starts without it and serves.
func TestStateFileCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	good, err := statefile.Encode(&statefile.State{Self: testSelf, Deltas: []wire.Delta{
		{Sender: testSelf, Entries: []crdt.Entry{{Rule: "local", Key: "mallory", Window: t0 / int64(time.Hour), Count: 10}}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, good[:len(good)-2], 0o600))
	a := restarted(t, stateYAML(path))
	assert.Equal(t, 200, a.Get("/readyz").Status)
	assert.Equal(t, 30, a.spendAll(10), "nothing of a corrupt file is loaded")
	v, _ := servertest.MetricValue(a.Scrape(), "geolimit_state_loads_total", "result", "corrupt")
	assert.Equal(t, 1.0, v)
	_, err = os.Stat(path + ".corrupt")
	assert.NoError(t, err, "the corrupt file is kept aside")
}

// Another node's state file is not loaded: its counts are not this node's.
func TestStateFileOfAnotherNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	other := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-2", Incarnation: 3}
	require.NoError(t, statefile.Write(path, statefile.Header{Self: other}, statefile.FromSlice([]wire.Delta{
		{Sender: other, Entries: []crdt.Entry{{Rule: "per-ip", Key: "mallory", Window: t0 / int64(time.Hour), Count: 10}}}})))
	a := restarted(t, stateYAML(path))
	assert.Equal(t, 30, a.spendAll(10))
	v, _ := servertest.MetricValue(a.Scrape(), "geolimit_state_loads_total", "result", "foreign")
	assert.Equal(t, 1.0, v)
}

// TestStateFileNotRegular: a state.file that names a named pipe (or a
// directory) is refused at start with an error naming the field, at once:
// opening a pipe would wait for a writer forever.
func TestStateFileNotRegular(t *testing.T) {
	for _, kind := range []string{"pipe", "dir"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			if kind == "pipe" {
				require.NoError(t, syscall.Mkfifo(path, 0o600))
			} else {
				require.NoError(t, os.Mkdir(path, 0o700))
			}
			cfg, err := config.Parse([]byte(servertest.WithBase("state: {file: " + path + "}\n")))
			require.NoError(t, err)
			app, err := New(Options{Config: cfg, Self: testSelf, Clock: clock.NewManual(t0), WatchInterval: -1, Logger: servertest.Logger(t)})
			require.NoError(t, err)
			err = app.Start(context.Background())
			require.Error(t, err)
			assert.Contains(t, err.Error(), "state.file")
			assert.ErrorIs(t, err, statefile.ErrNotRegular)
			fi, err := os.Lstat(path)
			require.NoError(t, err)
			assert.False(t, fi.Mode().IsRegular(), "nothing was written over it")
		})
	}
}
