// Package scenarios ships the simulator's built-in scenarios: every
// *.yaml file of this folder (and of scale/ and live/), so that `sim -scenario NAME`
// finds them by name from anywhere and `sim -list` lists them.
package scenarios

import (
	"embed"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed *.yaml scale/*.yaml live/*.yaml
var files embed.FS

// Names returns the built-in scenarios' names (their file names without
// .yaml, scale/ and live/ ones as scale/NAME and live/NAME), sorted.
func Names() []string {
	var out []string
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
			out = append(out, strings.TrimSuffix(p, ".yaml"))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// Get returns the built-in scenario called name (with or without .yaml).
func Get(name string) ([]byte, bool) {
	name = strings.TrimSuffix(path.Clean(name), ".yaml")
	b, err := files.ReadFile(name + ".yaml")
	return b, err == nil
}
