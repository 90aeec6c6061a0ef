package config

import (
	"fmt"
	"path/filepath"
	"time"
)

// DefaultStateInterval is the default state.interval.
const DefaultStateInterval = 5 * time.Second

// State keeps the node's counts in a file across restarts: a node alone in
// its PoP, or a PoP restarted whole, then goes on where it stopped instead
// of admitting its limits again.
type State struct {
	// File is where the counts of the live windows are written (atomically:
	// a temporary file, fsync, rename) every Interval and at shutdown, and
	// read at start. Empty (the default) keeps no state.
	File string `yaml:"file"`
	// Interval is how often the file is written. Counts admitted after the
	// last write are lost if the process is killed. Default 5s.
	Interval Duration `yaml:"interval"`
}

func (s *State) validate() error {
	if s.Interval <= 0 {
		return fmt.Errorf("state.interval: must be positive, got %s", s.Interval)
	}
	if s.File == "" {
		return nil
	}
	if filepath.Base(s.File) == "." || filepath.Base(s.File) == string(filepath.Separator) {
		return fmt.Errorf("state.file: %q names no file", s.File)
	}
	return nil
}
