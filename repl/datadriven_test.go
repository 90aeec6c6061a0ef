package repl

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A minimal data-driven test runner in the style of etcd raft's
// testdata/*.txt (cockroachdb/datadriven), written here so that the module
// gains no dependency.
//
// A script is a sequence of blocks:
//
//	# comments and blank lines are kept as they are
//	command arg key=value ...
//	----
//	expected output (up to the next blank line or the end of the file)
//
// Each command runs against the state the earlier commands of the same file
// left. With -update, the expected blocks are rewritten with what the
// commands print.

var update = flag.Bool("update", false, "rewrite the expected output of repl/testdata scripts")

// ddCmd is one parsed command line.
type ddCmd struct {
	Pos  string // file:line
	Line string
	Name string
	Args []string          // positional arguments, in order
	KV   map[string]string // key=value arguments
}

// has reports whether the positional flag f was given.
func (c *ddCmd) has(f string) bool {
	for _, a := range c.Args {
		if a == f {
			return true
		}
	}
	return false
}

func parseCmd(pos, line string) *ddCmd {
	c := &ddCmd{Pos: pos, Line: line, KV: map[string]string{}}
	for i, f := range strings.Fields(line) {
		if i == 0 {
			c.Name = f
			continue
		}
		if k, v, ok := strings.Cut(f, "="); ok {
			c.KV[k] = v
			continue
		}
		c.Args = append(c.Args, f)
	}
	return c
}

// runScript runs the script at path, handing each command to run, and
// compares (or, with -update, rewrites) the expected blocks.
func runScript(t *testing.T, path string, run func(c *ddCmd) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			out.WriteString(line + "\n")
			continue
		}
		pos := fmt.Sprintf("%s:%d", path, i+1)
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s: command %q is not followed by ----", pos, line)
		}
		i += 2
		var expected []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			expected = append(expected, lines[i])
		}
		i-- // the blank line (or the end) is copied by the loop
		actual := strings.TrimRight(run(parseCmd(pos, line)), "\n")
		if strings.Contains(actual, "\n\n") {
			t.Fatalf("%s: output of %q contains a blank line", pos, line)
		}
		out.WriteString(line + "\n----\n")
		if actual != "" {
			out.WriteString(actual + "\n")
		}
		if want := strings.Join(expected, "\n"); !*update && actual != want {
			t.Errorf("%s: %s\n%s", pos, line, lineDiff(want, actual))
		}
		if t.Failed() && !*update {
			// Later output depends on this step; one report is enough.
			return
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lineDiff renders want and got side by side, marking lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	b.WriteString("expected:\n" + want + "\ngot:\n" + got + "\ndiff:\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "  line %d:\n    - %s\n    + %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

// scripts lists the testdata scripts, sorted.
func scripts(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	if len(paths) == 0 {
		t.Fatal("no scripts in testdata")
	}
	return paths
}

func TestParseCmd(t *testing.T) {
	c := parseCmd("f:1", "node name=eu/ams/a1 inc=1 pop global")
	if c.Name != "node" || c.KV["name"] != "eu/ams/a1" || c.KV["inc"] != "1" || !c.has("pop") || !c.has("global") || c.has("relay") {
		t.Fatalf("parsed %+v", c)
	}
}
