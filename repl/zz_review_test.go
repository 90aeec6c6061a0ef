package repl

import (
	"os"
	"path/filepath"
	"testing"
)

func TestZZReview(t *testing.T) {
	paths, _ := filepath.Glob("/tmp/review/*.txt")
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			h := newHarness(t)
			runScript(t, p, h.run)
		})
	}
	_ = os.Stdout
}
