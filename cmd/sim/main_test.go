package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const scenario = `
name: cmd-test
seed: 3
duration: 20s
topology:
  - {region: eu, pops: [{name: ams, nodes: 2}]}
  - {region: us, pops: [{name: iad, nodes: 1}]}
network:
  inter_region: {latency: 50ms, jitter: 5ms}
replication: {peer_timeout: 500ms}
rules:
  - {name: api, limit: 100, window: 2s}
traffic:
  - {rule: api, keys: 2, rate: 200/s, track: 2}
events:
  - {at: 5s, partition: [[eu], [us]]}
  - {at: 15s, heal: true}
`

func writeScenario(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "s.yaml")
	require.NoError(t, os.WriteFile(path, []byte(scenario), 0o644))
	return dir, path
}

func TestRunWritesEveryOutput(t *testing.T) {
	dir, path := writeScenario(t)
	out := func(name string) string { return filepath.Join(dir, name) }
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{
		"-scenario", path, "-json", out("r.json"), "-csv", out("r.csv"), "-svg", out("r.svg"), "-log", out("r.log"), "-no-timing",
	}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	assert.Contains(t, stdout.String(), "partitioned")
	assert.Contains(t, stdout.String(), "central")

	var rep map[string]any
	b, err := os.ReadFile(out("r.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	for _, f := range []string{"scenario", "seed", "policy", "requests", "admitted", "rejected", "over_limit_admits",
		"wrongly_rejected", "max_admitted_ratio", "p99_admitted_ratio", "mean_admitted_ratio", "phases",
		"convergence_ms", "replication", "central", "sim_requests_per_s"} {
		assert.Contains(t, rep, f)
	}
	repl := rep["replication"].(map[string]any)
	assert.Contains(t, repl, "messages_per_s_per_pop")
	assert.Contains(t, repl, "bytes_per_s_per_pop")
	assert.EqualValues(t, 0, rep["sim_requests_per_s"], "-no-timing")

	csv, err := os.ReadFile(out("r.csv"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	assert.Equal(t, "policy,t_ms,rule,key,true_admitted,limit,central_admitted,partitioned,view_eu,view_us", lines[0])
	assert.Len(t, lines, 1+20*2, "one row per second per tracked key")

	svg, err := os.ReadFile(out("r.svg"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(svg), "<svg"))
	assert.Contains(t, string(svg), "<polyline")

	log, err := os.ReadFile(out("r.log"))
	require.NoError(t, err)
	logLines := strings.Split(strings.TrimSpace(string(log)), "\n")
	assert.Equal(t, "t_ms,region,pop,node,rule,key,cost,admitted", logLines[0])
	assert.EqualValues(t, len(logLines)-1, rep["requests"])

	// Same seed, same bytes, in every output.
	require.NoError(t, run(context.Background(), []string{
		"-scenario", path, "-json", out("r2.json"), "-csv", out("r2.csv"), "-svg", out("r2.svg"), "-log", out("r2.log"), "-no-timing",
	}, &stdout, &stderr))
	for _, name := range []string{"json", "csv", "svg", "log"} {
		a, err := os.ReadFile(out("r." + name))
		require.NoError(t, err)
		b, err := os.ReadFile(out("r2." + name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(a, b), "-%s differs between two runs of the same seed", name)
	}
}

func TestRunSeedAndCompare(t *testing.T) {
	dir, path := writeScenario(t)
	var stdout, stderr bytes.Buffer
	js := filepath.Join(dir, "c.json")
	require.NoError(t, run(context.Background(), []string{"-scenario", path, "-seed", "99", "-compare", "keep,keep", "-json", js}, &stdout, &stderr))
	b, err := os.ReadFile(js)
	require.NoError(t, err)
	var got struct {
		Runs []struct {
			Seed     uint64 `json:"seed"`
			Policy   string `json:"policy"`
			Admitted uint64 `json:"admitted"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Len(t, got.Runs, 2)
	assert.EqualValues(t, 99, got.Runs[0].Seed)
	assert.Equal(t, "keep", got.Runs[1].Policy)
	assert.Equal(t, got.Runs[0].Admitted, got.Runs[1].Admitted)
}

func TestRunErrors(t *testing.T) {
	_, path := writeScenario(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no scenario", nil, "-scenario FILE is required"},
		{"missing file", []string{"-scenario", "/nonexistent.yaml"}, "no such file, nor a built-in scenario"},
		{"bad compare", []string{"-scenario", path, "-compare", "keep,panic"}, `unknown partition policy "panic"`},
		{"log with compare", []string{"-scenario", path, "-compare", "keep,keep", "-log", "x"}, "-log takes one run"},
		{"unknown flag", []string{"-scenari", path}, "flag provided but not defined"},
		{"bad allowance", []string{"-scenario", path, "-near-limit-allowance", "maybe"}, `-near-limit-allowance "maybe": want on or off`},
		{"zero rate scale", []string{"-scenario", path, "-rate-scale", "0"}, "-rate-scale 0: must be positive"},
		{"negative rate scale", []string{"-scenario", path, "-rate-scale", "-1"}, "-rate-scale -1: must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tc.want)
		})
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	_, path := writeScenario(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-scenario", path}, &stdout, &stderr)
	require.ErrorIs(t, err, context.Canceled)
}

// -near-limit-allowance off runs the scenario as if every node decided on
// its estimate alone: a hot key overshoots far more.
func TestRunNearLimitAllowanceFlag(t *testing.T) {
	dir := t.TempDir()
	maxRatio := func(mode string) float64 {
		js := filepath.Join(dir, mode+".json")
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"-scenario", "../../scenarios/hot-key-attack.yaml", "-rate-scale", "0.2", "-quiet", "-near-limit-allowance", mode, "-json", js}, &stdout, &stderr))
		b, err := os.ReadFile(js)
		require.NoError(t, err)
		var got struct {
			Max float64 `json:"max_admitted_ratio"`
		}
		require.NoError(t, json.Unmarshal(b, &got))
		return got.Max
	}
	on, off := maxRatio("on"), maxRatio("off")
	assert.Less(t, on, 1.15)
	assert.Greater(t, off, 1.3)
}

// -list lists the built-in scenarios; -scenario finds them by name; -help
// names them.
func TestBuiltInScenarios(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-list"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "two-regions-cut ")
	assert.Contains(t, stdout.String(), "scale/edge-10pops ")

	stdout.Reset()
	err := run(context.Background(), []string{"-scenario", "healthy-two-regions", "-quiet", "-no-timing", "-rate-scale", "0.01"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	assert.Contains(t, stdout.String(), "healthy-two-regions")

	stderr.Reset()
	require.ErrorIs(t, run(context.Background(), []string{"-help"}, &stdout, &stderr), flag.ErrHelp)
	assert.Contains(t, stderr.String(), "built-in scenarios: anycast-pop-loss,")
}

// TestHTMLReport: -html writes one self-contained HTML report (no script,
// nothing loaded) that leads with the summary, holds the plot with the
// fault phase labelled, the phases table folded, the admits per region and
// what central is; the text report leads with the same summary and
// -compare prints the phase table compactly; -json is the same bytes with
// or without -html.
func TestHTMLReport(t *testing.T) {
	dir, path := writeScenario(t)
	out := func(name string) string { return filepath.Join(dir, name) }
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-scenario", path, "-compare", "keep,share", "-no-timing", "-quiet",
		"-html", out("r.html"), "-json", out("a.json")}, &stdout, &stderr), stderr.String())
	var plain bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-scenario", path, "-compare", "keep,share", "-no-timing", "-quiet",
		"-json", out("b.json")}, &plain, &stderr), stderr.String())
	a, err := os.ReadFile(out("a.json"))
	require.NoError(t, err)
	b, err := os.ReadFile(out("b.json"))
	require.NoError(t, err)
	assert.Equal(t, string(b), string(a), "-json does not depend on -html")
	assert.Equal(t, plain.String(), stdout.String())

	text := stdout.String()
	lines := strings.Split(text, "\n")
	require.Greater(t, len(lines), 3)
	assert.True(t, strings.HasPrefix(lines[2], "cmd-test, 20s (partitioned 5s-15s): "), lines[2])
	flat := strings.Join(strings.Fields(text), " ")
	assert.Regexp(t, `(share|keep) (stayed within|went to) [0-9.]+`, flat)
	assert.Contains(t, flat, "of what one central limiter admits")
	phaseRows := 0
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "healthy" || f[0] == "partitioned" || f[0] == "healed") {
			phaseRows++
		}
	}
	assert.Equal(t, 3, phaseRows, "-compare: one row per phase")
	assert.Contains(t, flat, "central is one node deciding every request of the same arrivals")

	h, err := os.ReadFile(out("r.html"))
	require.NoError(t, err)
	page := string(h)
	assert.True(t, strings.HasPrefix(page, "<!doctype html>"))
	sum := strings.Index(page, `id="summary"`)
	svg := strings.Index(page, "<svg")
	require.Positive(t, sum)
	assert.Less(t, sum, svg, "the summary comes first")
	assert.Contains(t, page, "of what one central limiter admits")
	assert.Contains(t, page, "partitioned 5s-15s</text>", "the fault phase, labelled on the plot")
	assert.Contains(t, page, `<details id="phases">`, "the phases table, folded")
	assert.Contains(t, page, `<table id="regions">`)
	assert.Contains(t, page, "sliding-window estimate and zero latency, measured against the exact count")
	for _, banned := range []string{"<script", "http://", "https://", "<link", "<img", "@import"} {
		if banned == "http://" {
			page = strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, "")
		}
		assert.NotContains(t, page, banned, "self-contained")
	}
}
