package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/internal/statefile"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// stateKeeper writes the node's counts to state.file and loads them at
// start, so that a node restarts where it stopped (see
// pop.Node.SnapshotEach and RestoreDelta).
// Safe for concurrent use.
type stateKeeper struct {
	path   string
	every  time.Duration
	writes *prometheus.CounterVec // by result: ok, failed
	loads  *prometheus.CounterVec // by result: ok, absent, corrupt, foreign, failed
	mu     sync.Mutex             // one write at a time
	// soon asks for a write now: a rule's mode was set here (modes.go).
	soon chan struct{}
}

func newStateKeeper(a *App) *stateKeeper {
	s := &stateKeeper{
		path:  a.cfg.State.File,
		every: a.cfg.State.Interval.D(),
		soon:  make(chan struct{}, 1),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geolimit_state_writes_total",
			Help: "Writes of state.file by result (ok, failed).",
		}, []string{"result"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geolimit_state_loads_total",
			Help: "Loads of state.file at start by result (ok, absent, corrupt, foreign: another node's, failed: unreadable).",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "failed"} {
		s.writes.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "absent", "corrupt", "foreign", "failed"} {
		s.loads.WithLabelValues(r)
	}
	a.reg.MustRegister(s.writes, s.loads)
	return s
}

// loadState merges state.file into the node before anything is decided. A
// missing file is a first start; a corrupt one is logged, counted, moved
// aside (path.corrupt) and the node starts without it: a limiter that
// refuses to start over its own cache would turn a disk fault into an
// outage. A path that is not a regular file (a directory, a named pipe) is
// a configuration mistake, not a fault: it is an error, and the App does
// not start.
func (a *App) loadState() error {
	s := a.state
	if s == nil || s.path == "" {
		return nil
	}
	f, err := statefile.Open(s.path)
	switch {
	case errors.Is(err, statefile.ErrNotRegular):
		s.loads.WithLabelValues("failed").Inc()
		s.path = "" // nothing is written over it at shutdown either
		return fmt.Errorf("engine: state.file: %w", err)
	case errors.Is(err, fs.ErrNotExist):
		s.loads.WithLabelValues("absent").Inc()
		a.log.Info("no state file yet; starting without former counts", "path", s.path)
		return nil
	case errors.Is(err, statefile.ErrCorrupt), errors.Is(err, statefile.ErrVersion):
		s.loads.WithLabelValues("corrupt").Inc()
		aside := s.path + ".corrupt"
		if rerr := os.Rename(s.path, aside); rerr != nil {
			aside = ""
		}
		a.log.Error("state file unusable; starting without former counts", "path", s.path, "moved_to", aside, "err", err)
		return nil
	case err != nil:
		s.loads.WithLabelValues("failed").Inc()
		a.log.Error("state file unreadable; starting without former counts", "path", s.path, "err", err)
		return nil
	}
	defer f.Close()
	self := a.opts.Self
	if f.Self.Region != self.Region || f.Self.PoP != self.PoP || f.Self.Node != self.Node {
		s.loads.WithLabelValues("foreign").Inc()
		a.log.Error("state file written by another node; ignored", "path", s.path, "writer", f.Self.String(), "self", self.String())
		return nil
	}
	now := a.clk.Now()
	var res pop.ApplyStats
	restores := a.opts.Config.Replication.Restorer(self.PoPID)
	err = f.Deltas(func(d *wire.Delta) error {
		if !restores(d.Sender) {
			return nil // its region gives them back (repl.Settings.Restorer)
		}
		res.Add(a.node.RestoreDelta(now, d))
		return nil
	})
	if err != nil {
		// The disk failed, or the file was changed in place, between the
		// check and the read: what was merged stays merged (counts merge
		// by maximum), the rest is lost.
		s.loads.WithLabelValues("failed").Inc()
		a.log.Error("state file unreadable part way; starting with what was read", "path", s.path, "err", err, "merged", res.Merged)
		return nil
	}
	s.loads.WithLabelValues("ok").Inc()
	a.log.Info("state restored", "path", s.path, "writer", f.Self.String(), "age", time.Duration(now-f.SavedAt).Round(time.Millisecond),
		"merged", res.Merged, "expired", res.Stale, "refused", res.Rejected())
	return nil
}

// saveState writes the node's counts to state.file.
func (a *App) saveState() error {
	s := a.state
	if s == nil || s.path == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := a.clk.Now()
	err := statefile.Write(s.path, statefile.Header{Self: a.opts.Self, SavedAt: now}, a.node.SnapshotEach(now))
	if err != nil {
		s.writes.WithLabelValues("failed").Inc()
		a.log.Error("state file not written", "path", s.path, "err", err)
		return err
	}
	s.writes.WithLabelValues("ok").Inc()
	return nil
}
